// TokenDataset: a read-only sequence of token pieces (a shard file, or an in-memory stream) cut
// into fixed windows. Invariants: a sample of length T is a window of T+1 consecutive tokens
// (inputs and the targets shifted by one) lying inside one piece; sample s of piece p starts at
// token s*T of that piece, so windows never overlap except for their shared boundary token and
// every token but the last of a piece is a target exactly once per epoch.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace trillion::data {

enum class Split { kTrain, kValidation };
const char* split_name(Split split);

class TokenDataset {
 public:
  virtual ~TokenDataset() = default;

  // Token ids are in [0, vocab_size()).
  virtual int64_t vocab_size() const = 0;
  // Exact entropy rate of the generating process in nats/token, when it is known (synthetic).
  virtual std::optional<double> entropy_rate() const { return std::nullopt; }
  // Bytes of source text per token (tokenized text), to turn nats/token into bits/byte:
  // bits/byte = loss / (bytes_per_token * ln 2).
  virtual std::optional<double> bytes_per_token() const { return std::nullopt; }
  // One line saying where the tokens come from, for logs and error messages.
  virtual std::string describe() const = 0;

  int64_t num_pieces() const { return static_cast<int64_t>(piece_tokens_.size()); }
  int64_t num_tokens() const;
  // Windows of seq_len+1 tokens: sum over pieces of (tokens - 1) / seq_len.
  int64_t num_samples(int seq_len) const;
  // Copies the seq_len+1 tokens of sample `sample` (0 <= sample < num_samples) into window.
  void read_window(int64_t sample, int seq_len, int32_t* window) const;
  // Copies tokens [offset, offset+count) of piece `piece` (bounds-checked).
  void read_tokens(int64_t piece, int64_t offset, int64_t count, int32_t* out) const;

 protected:
  // Copies tokens [offset, offset+count) of piece `piece` into out.
  virtual void copy_tokens(int64_t piece, int64_t offset, int64_t count, int32_t* out) const = 0;
  std::vector<int64_t> piece_tokens_;  // tokens per piece, set by the subclass constructor
};

// A dataset over one token stream held in memory (synthetic sources, tests).
class InMemoryDataset : public TokenDataset {
 public:
  InMemoryDataset(std::vector<int32_t> tokens, int64_t vocab_size, std::string description,
                  std::optional<double> entropy_rate = std::nullopt);
  int64_t vocab_size() const override { return vocab_size_; }
  std::optional<double> entropy_rate() const override { return entropy_rate_; }
  std::string describe() const override { return description_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }

 protected:
  void copy_tokens(int64_t piece, int64_t offset, int64_t count, int32_t* out) const override;

 private:
  std::vector<int32_t> tokens_;
  int64_t vocab_size_;
  std::string description_;
  std::optional<double> entropy_rate_;
};

// Throws a trillion::Error naming the dataset, both vocab sizes and the fix, unless every token
// id of `dataset` fits a model with `model_vocab` rows (dataset vocab <= model vocab).
void check_vocab_fits(const TokenDataset& dataset, int64_t model_vocab);

}  // namespace trillion::data
