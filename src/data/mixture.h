// MixtureLoader: several token datasets blended by weight into one sample stream (data.sources).
// Invariants: the sample read for global index g is a pure function of (sources, weights,
// seq_len, seed, g) — resume, resharding and any dp read the same stream, as with one DataLoader.
// The stream is cut into blocks of kMixtureBlock consecutive samples; in every block source s
// gets exactly quota_s samples (the weights' largest-remainder rounding), spread through the
// block by smooth weighted round-robin, so after any n samples source s has been read
// n * quota_s / kMixtureBlock times, give or take the number of sources. Source s's k-th sample
// is sample k of its own DataLoader (seed keyed by s): epoch k / N_s of its own permutation, so a
// source that runs out wraps into its next epoch unless the run stops (data.on_exhausted).
// One source of weight 1 is exactly its DataLoader.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "data/loader.h"

namespace trillion::data {

constexpr int64_t kMixtureBlock = 10000;

class MixtureLoader {
 public:
  // weights > 0 (normalised here); one dataset per weight.
  MixtureLoader(std::vector<std::shared_ptr<const TokenDataset>> sources,
                std::vector<double> weights, int seq_len, uint64_t seed,
                SampleOrder order = SampleOrder::kShuffled);

  int num_sources() const { return static_cast<int>(loaders_.size()); }
  const DataLoader& source(int s) const { return loaders_.at(s); }
  int seq_len() const { return loaders_.front().seq_len(); }
  // The source global sample g reads, and which of that source's samples (k, counting from 0).
  struct Draw {
    int source;
    uint64_t index;
  };
  Draw draw(uint64_t global_index) const;
  // Samples of source s among global samples [0, n).
  uint64_t samples_before(uint64_t n, int s) const;
  // The first source of global samples [first, first + count) that would start a second epoch
  // (nullopt: none does).
  std::optional<int> exhausted_in(uint64_t first, int64_t count) const;

  void sample(uint64_t global_index, int32_t* tokens, int32_t* targets) const;
  void batch(uint64_t first_global_index, int batch_size, int32_t* tokens, int32_t* targets) const;

 private:
  std::vector<DataLoader> loaders_;
  std::vector<int64_t> quota_;         // samples of each source per block
  std::vector<int32_t> block_source_;  // [kMixtureBlock] source of each block position
  std::vector<int32_t> block_index_;   // [kMixtureBlock] its index among the source's in-block
  std::vector<int32_t> block_prefix_;  // [kMixtureBlock + 1][S] samples of s before position
};

}  // namespace trillion::data
