// Byte-level BPE with ranked merges, as existing tokenizers define it: a Hugging Face
// tokenizer.json with a BPE model over GPT-2's byte alphabet (GPT-2, Llama 3, ...) or a tiktoken
// ranks file (r50k, cl100k, Llama 3's tokenizer.model). Text is split by the tokenizer's
// pre-tokenizer regex (data/regex_split.h), each piece starts as one symbol per byte, and the
// adjacent pair of lowest rank is merged (leftmost first among equal ranks) until no pair has a
// rank: Hugging Face's BPE word merge and tiktoken's byte_pair_merge give the same pieces, since
// a tiktoken pair's rank is the rank of the token it makes. Invariants: every byte has initial
// symbols: its byte-level token, or, under byte_fallback when the vocabulary lacks that token, the
// <0xXX> tokens of the byte-level character's UTF-8 bytes (what Hugging Face's BPE gives an
// unknown character; decoding a run of <0xXX> tokens reads those bytes back as byte-level
// characters, as its ByteFallback and ByteLevel decoders do); a merge's result id is
// the token of the concatenated bytes; ids of holes in the vocabulary are never emitted and do
// not decode.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "data/regex_split.h"
#include "data/text_tokenizer.h"

namespace trillion::data {

class RankedBpe final : public TextTokenizer {
 public:
  enum class TokenKind : uint8_t { kNormal, kSpecial, kHole };
  struct MergeRule {
    int32_t rank = 0;
    int32_t id = 0;  // the token the pair becomes
  };
  struct Spec {
    std::string format;                              // "hf-tokenizer.json" or "tiktoken"
    std::vector<std::string> token_bytes;            // id -> bytes (a special token: its text)
    std::vector<TokenKind> kinds;                    // id -> kind, same size
    std::array<int32_t, 256> byte_ids{};             // initial symbol of each byte, or -1:
    std::array<std::vector<int32_t>, 256> fallback_ids;        // then its <0xXX> symbols
    std::unordered_map<int32_t, unsigned char> fallback_byte;  // <0xXX> token id -> XX
    std::unordered_map<uint64_t, MergeRule> merges;  // pair_key(left, right) -> rule
    SplitPattern pattern = SplitPattern::kGpt2;
    bool add_prefix_space = false;  // ByteLevel's: a space before text not starting with one
    bool ignore_merges = false;     // tokenizer.json: a piece that is a token is that token
    bool byte_fallback = false;
    // Added tokens that are not special: matched in the text before splitting (Hugging Face).
    std::vector<std::pair<std::string, int32_t>> text_added;
    std::optional<int32_t> end_id, begin_id;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }

  explicit RankedBpe(Spec spec);

  std::string format() const override { return spec_.format; }
  int vocab_size() const override { return static_cast<int>(spec_.token_bytes.size()); }
  void encode_append(std::string_view text, std::vector<int32_t>& out) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  std::optional<int32_t> document_end_id() const override { return spec_.end_id; }
  std::optional<int32_t> document_begin_id() const override { return spec_.begin_id; }

  const Spec& spec() const { return spec_; }
  TokenKind kind(int32_t id) const { return spec_.kinds.at(id); }
  // Every merge as (left, right) in rank order, ties by the parts' ids: a tokenizer.json's own
  // merges as they were, and for tiktoken ranks every split of each token into two tokens, as
  // Hugging Face's conversion of tiktoken files writes them.
  std::vector<std::pair<int32_t, int32_t>> merge_list() const;

 private:
  void encode_segment(std::string_view text, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void merge_piece(std::string_view piece, std::vector<int32_t>& out) const;

  Spec spec_;
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  // bytes -> id, for ignore_merges (looked up by string_view, no copy per piece)
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> whole_tokens_;
  uint64_t instance_;  // keys the per-thread piece cache
};

// Parses a tokenizer.json (already read from `path`) into a RankedBpe; Errors name the field.
std::unique_ptr<RankedBpe> load_hf_tokenizer_json(std::string_view text, const std::string& path);
// Parses a tiktoken ranks file. The pre-tokenizer and special tokens are not in the file; they
// follow from the number of ranks: 50,256 (r50k/GPT-2: GPT-2's regex, <|endoftext|>), 100,256
// (cl100k: its regex and specials), 128,000 (Llama 3: its regex and 256 specials); any other
// count gets the Llama 3 regex at >= 100,000 ranks (GPT-2's below) and <|endoftext|> after the
// ranks.
std::unique_ptr<RankedBpe> load_tiktoken(std::string_view text, const std::string& path);

}  // namespace trillion::data
