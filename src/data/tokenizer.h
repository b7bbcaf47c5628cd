// Byte-level BPE tokenizer. Ids 0..255 are the bytes, 256..256+M-1 the merges in the order they
// were learned (a merge's id is also its rank), then the special tokens <|bos|>, <|eos|>,
// <|pad|>. Invariants: decode(encode(x)) == x for every byte string x; encode never emits a
// special token (text that looks like "<|eos|>" is encoded as ordinary bytes), so specials only
// appear where a caller puts them; training is deterministic (ties broken by pair ids).
#pragma once

#include <climits>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "data/text_tokenizer.h"

namespace trillion::data {

constexpr int kNumSpecialTokens = 3;
constexpr int kMinVocabSize = 256 + kNumSpecialTokens;
constexpr int64_t kMaxMerges = INT32_MAX - kMinVocabSize;  // every id fits in int32

struct BpeTrainStats {
  int64_t corpus_bytes = 0;
  int64_t chunks = 0;  // pre-tokenized chunks in the corpus
  int64_t unique_chunks = 0;
  int64_t merges = 0;
  double seconds = 0;
};

class Tokenizer final : public TextTokenizer {
 public:
  // Learns vocab_size - 259 merges from `texts` (stops early if no pair occurs twice).
  static Tokenizer train(std::span<const std::string> texts, int vocab_size,
                         BpeTrainStats* stats = nullptr);
  // Builds a tokenizer from its merges (pairs of earlier ids); checks them.
  explicit Tokenizer(std::vector<std::pair<int32_t, int32_t>> merges,
                     const std::string& origin = "merges");
  Tokenizer(Tokenizer&&) noexcept = default;
  Tokenizer& operator=(Tokenizer&&) noexcept = default;

  // Reads a tokenizer file; every field is checked and named in the Error when it is missing,
  // mistyped or inconsistent (a merge referring to a later id, vocab_size not 259 + merges, a
  // "pretokenizer" other than save()'s, "special_tokens" other than the three ids after the
  // merges; those two fields may be absent).
  static Tokenizer load(const std::string& path);
  // The same from the file's text (`path` names it in messages).
  static Tokenizer from_json(std::string_view text, const std::string& path);
  void save(const std::string& path) const;  // JSON, written atomically

  std::string format() const override { return "trillion-bpe"; }
  int vocab_size() const override { return static_cast<int>(token_bytes_.size()); }
  std::optional<int32_t> document_end_id() const override { return eos_id(); }
  std::optional<int32_t> document_begin_id() const override { return bos_id(); }
  int32_t bos_id() const { return special_base() + 0; }
  int32_t eos_id() const { return special_base() + 1; }
  int32_t pad_id() const { return special_base() + 2; }
  bool is_special(int32_t id) const { return id >= special_base() && id < vocab_size(); }
  const std::vector<std::pair<int32_t, int32_t>>& merges() const { return merges_; }
  // The bytes a token stands for (a special token's text for specials).
  const std::string& token_bytes(int32_t id) const;

  std::vector<int32_t> encode(std::string_view text) const;
  void encode_append(std::string_view text, std::vector<int32_t>& out) const override;
  // Throws a trillion::Error for an id outside [0, vocab_size).
  std::string decode(std::span<const int32_t> ids) const override;

 private:
  int32_t special_base() const { return 256 + static_cast<int32_t>(merges_.size()); }
  void encode_chunk(std::string_view chunk, std::vector<int32_t>& out) const;

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Cache {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> entries;
  };

  std::vector<std::pair<int32_t, int32_t>> merges_;
  std::unordered_map<uint64_t, int32_t> merge_id_;  // (left << 32 | right) -> merged id
  std::vector<std::string> token_bytes_;
  std::unique_ptr<Cache> cache_ = std::make_unique<Cache>();  // chunk -> ids, bounded size
};

const char* special_token_name(int index);  // "<|bos|>", "<|eos|>", "<|pad|>"

// Throws a trillion::Error naming both sides and the fix unless the vocab sizes are equal.
void check_tokenizer_matches(const Tokenizer& tokenizer, const std::string& tokenizer_path,
                             int64_t vocab_size, const std::string& other);

}  // namespace trillion::data
