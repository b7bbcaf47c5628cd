// DataLoader: turns a global sample index into a training sample. Invariants: the sample read
// for global index g is a pure function of (dataset, seq_len, seed, g): epoch = g / N and
// position = g % N (N = num_samples), and within an epoch the positions map to dataset samples
// through a seeded bijection of [0, N), so no sample is repeated or skipped in an epoch and a
// run resumed at index g reads exactly what an uninterrupted run reads from g on.
//
// Data parallelism: with a global batch of B = dp * B_local samples starting at index `first`,
// rank r reads batch(first + r * B_local, B_local, ...); the global order never depends on dp.
#pragma once

#include <cstdint>
#include <memory>

#include "data/dataset.h"

namespace trillion::data {

// A keyed pseudo-random permutation of [0, n): a balanced Feistel network on the smallest even
// number of bits covering n, with Philox round functions keyed by (seed, epoch), restricted to
// [0, n) by cycle walking (fewer than 4 rounds of walking on average).
class SamplePermutation {
 public:
  SamplePermutation(uint64_t n, uint64_t seed);
  uint64_t size() const { return n_; }
  // The image of `position` (< n) in epoch `epoch`.
  uint64_t map(uint64_t epoch, uint64_t position) const;

 private:
  uint64_t encrypt(uint64_t epoch, uint64_t value) const;
  uint64_t n_;
  uint64_t seed_;
  int half_bits_;
};

enum class SampleOrder { kShuffled, kSequential };

class DataLoader {
 public:
  // kShuffled for training; kSequential (sample g reads dataset sample g % N) for validation.
  DataLoader(std::shared_ptr<const TokenDataset> dataset, int seq_len, uint64_t seed,
             SampleOrder order = SampleOrder::kShuffled);

  const TokenDataset& dataset() const { return *dataset_; }
  int seq_len() const { return seq_len_; }
  int64_t num_samples() const { return num_samples_; }  // samples per epoch
  uint64_t epoch_of(uint64_t global_index) const { return global_index / num_samples_; }
  // The dataset sample that global index `global_index` reads.
  int64_t dataset_sample(uint64_t global_index) const;

  // tokens[t] = window[t], targets[t] = window[t + 1], t < seq_len.
  void sample(uint64_t global_index, int32_t* tokens, int32_t* targets) const;
  // B consecutive global indices; tokens and targets are [B, T] row-major.
  void batch(uint64_t first_global_index, int batch_size, int32_t* tokens, int32_t* targets) const;

 private:
  std::shared_ptr<const TokenDataset> dataset_;
  int seq_len_;
  int64_t num_samples_;
  SampleOrder order_;
  SamplePermutation permutation_;
};

// Packed sequences (data.document_mask): documents end with the document-end token `end_id`, so
// the document holding position t of a window begins right after the last end token before t
// (at 0 for a document begun before the window). starts[t] = that position, t < T.
void document_starts(const int32_t* tokens, int64_t T, int32_t end_id, int32_t* starts);
// A target the loss ignores (the model's kIgnoredTarget, backend.h).
constexpr int32_t kNoTarget = -1;
// data.mask_boundary_loss: targets[t] := kNoTarget wherever tokens[t] is a document end (the
// prediction of the next document's first token from the end of this one), t < n.
void mask_boundary_targets(const int32_t* tokens, int64_t n, int32_t end_id, int32_t* targets);

}  // namespace trillion::data
