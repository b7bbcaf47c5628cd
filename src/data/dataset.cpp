// See dataset.h. Samples are located by walking the pieces' sample counts; datasets have few
// pieces (one per shard file), so the walk is cheaper than caching a table per seq_len.
#include "data/dataset.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace trillion::data {

const char* split_name(Split split) {
  return split == Split::kTrain ? "train" : "val";
}

int64_t TokenDataset::num_tokens() const {
  return std::accumulate(piece_tokens_.begin(), piece_tokens_.end(), int64_t{0});
}

int64_t TokenDataset::num_samples(int seq_len) const {
  if (seq_len < 1) throw Error("sequence length must be >= 1, got " + std::to_string(seq_len));
  int64_t total = 0;
  for (int64_t n : piece_tokens_) total += n > 1 ? (n - 1) / seq_len : 0;
  return total;
}

void TokenDataset::read_window(int64_t sample, int seq_len, int32_t* window) const {
  TRILLION_CHECK(sample >= 0 && seq_len >= 1, "bad sample index or sequence length");
  int64_t remaining = sample;
  for (int64_t p = 0; p < num_pieces(); ++p) {
    int64_t n = piece_tokens_[p];
    int64_t in_piece = n > 1 ? (n - 1) / seq_len : 0;
    if (remaining < in_piece) {
      copy_tokens(p, remaining * seq_len, seq_len + 1, window);
      return;
    }
    remaining -= in_piece;
  }
  TRILLION_CHECK(false, "sample " + std::to_string(sample) + " out of range for " + describe());
}

void TokenDataset::read_tokens(int64_t piece, int64_t offset, int64_t count, int32_t* out) const {
  TRILLION_CHECK(piece >= 0 && piece < num_pieces() && offset >= 0 && count >= 0 &&
                     offset + count <= piece_tokens_[piece],
                 "token range out of bounds for " + describe());
  copy_tokens(piece, offset, count, out);
}

InMemoryDataset::InMemoryDataset(std::vector<int32_t> tokens, int64_t vocab_size,
                                 std::string description, std::optional<double> entropy_rate)
    : tokens_(std::move(tokens)),
      vocab_size_(vocab_size),
      description_(std::move(description)),
      entropy_rate_(entropy_rate) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i] < 0 || tokens_[i] >= vocab_size_) {
      throw Error(description_ + ": token " + std::to_string(i) + " has id " +
                  std::to_string(tokens_[i]) + " outside the vocabulary [0, " +
                  std::to_string(vocab_size_) + ")");
    }
  }
  piece_tokens_ = {static_cast<int64_t>(tokens_.size())};
}

void InMemoryDataset::copy_tokens(int64_t, int64_t offset, int64_t count, int32_t* out) const {
  std::copy_n(tokens_.begin() + offset, count, out);
}

void check_vocab_fits(const TokenDataset& dataset, int64_t model_vocab) {
  if (dataset.vocab_size() > model_vocab) {
    throw Error("vocabulary mismatch: " + dataset.describe() + " has vocab size " +
                std::to_string(dataset.vocab_size()) + " but the model has vocab_size " +
                std::to_string(model_vocab) +
                "; set model.vocab_size >= " + std::to_string(dataset.vocab_size()) +
                " or use data made with a smaller tokenizer");
  }
}

}  // namespace trillion::data
