// See loader.h. Feistel networks give a bijection for any round function (Luby-Rackoff), so the
// permutation property does not depend on Philox's quality; six rounds make the order look
// random. Cycle walking keeps bijectivity on [0, n) because the Feistel map is a bijection on
// the larger power-of-four domain.
#include "data/loader.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/philox.h"

namespace trillion::data {

namespace {
constexpr int kFeistelRounds = 6;
}

SamplePermutation::SamplePermutation(uint64_t n, uint64_t seed) : n_(n), seed_(seed) {
  int bits = 2;
  while (bits < 64 && (uint64_t{1} << bits) < n) bits += 2;
  half_bits_ = bits / 2;
}

uint64_t SamplePermutation::encrypt(uint64_t epoch, uint64_t value) const {
  const uint64_t mask = (uint64_t{1} << half_bits_) - 1;
  uint64_t left = value >> half_bits_, right = value & mask;
  for (int round = 0; round < kFeistelRounds; ++round) {
    Philox f(seed_, fnv1a64("data.loader.order") + epoch * kFeistelRounds + round);
    PhiloxCounter w = f.block(right);
    uint64_t mixed = ((static_cast<uint64_t>(w[1]) << 32) | w[0]) & mask;
    uint64_t new_right = left ^ mixed;
    left = right;
    right = new_right;
  }
  return (left << half_bits_) | right;
}

uint64_t SamplePermutation::map(uint64_t epoch, uint64_t position) const {
  TRILLION_CHECK(position < n_, "permutation position out of range");
  uint64_t value = encrypt(epoch, position);
  while (value >= n_) value = encrypt(epoch, value);
  return value;
}

DataLoader::DataLoader(std::shared_ptr<const TokenDataset> dataset, int seq_len, uint64_t seed,
                       SampleOrder order)
    : dataset_(std::move(dataset)),
      seq_len_(seq_len),
      num_samples_(dataset_->num_samples(seq_len)),
      order_(order),
      permutation_(static_cast<uint64_t>(num_samples_), seed) {
  if (num_samples_ < 1) {
    throw Error(dataset_->describe() + " has " + std::to_string(dataset_->num_tokens()) +
                " tokens, too few for one sample of seq_len " + std::to_string(seq_len) +
                " (needs seq_len + 1 tokens); use more data or a shorter seq_len");
  }
}

int64_t DataLoader::dataset_sample(uint64_t global_index) const {
  uint64_t n = static_cast<uint64_t>(num_samples_);
  uint64_t position = global_index % n;
  if (order_ == SampleOrder::kSequential) return static_cast<int64_t>(position);
  return static_cast<int64_t>(permutation_.map(global_index / n, position));
}

void DataLoader::sample(uint64_t global_index, int32_t* tokens, int32_t* targets) const {
  std::vector<int32_t> window(seq_len_ + 1);
  dataset_->read_window(dataset_sample(global_index), seq_len_, window.data());
  std::copy_n(window.begin(), seq_len_, tokens);
  std::copy_n(window.begin() + 1, seq_len_, targets);
}

void DataLoader::batch(uint64_t first_global_index, int batch_size, int32_t* tokens,
                       int32_t* targets) const {
  for (int b = 0; b < batch_size; ++b) {
    sample(first_global_index + b, tokens + static_cast<int64_t>(b) * seq_len_,
           targets + static_cast<int64_t>(b) * seq_len_);
  }
}

void document_starts(const int32_t* tokens, int64_t T, int32_t end_id, int32_t* starts) {
  int32_t start = 0;
  for (int64_t t = 0; t < T; ++t) {
    starts[t] = start;
    if (tokens[t] == end_id) start = static_cast<int32_t>(t + 1);
  }
}

void mask_boundary_targets(const int32_t* tokens, int64_t n, int32_t end_id, int32_t* targets) {
  for (int64_t t = 0; t < n; ++t) {
    if (tokens[t] == end_id) targets[t] = kNoTarget;
  }
}

}  // namespace trillion::data
