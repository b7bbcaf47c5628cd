// The pre-tokenizer regexes of existing byte-level BPE tokenizers, matched by hand-written code
// (no regex engine) over Unicode classes (data/unicode_classes.h):
//   GPT-2 (also r50k/p50k):
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   Llama 3 (also cl100k_base):
//     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//     \s*[\r\n]+|\s+(?!\S)|\s+
// Each split returns the leftmost-first match a backtracking engine gives at each position.
// Invariants: the pieces concatenate to the input exactly, for any bytes (a byte that is not
// UTF-8 is one code point of class "other"); every piece is non-empty.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace trillion::data {

enum class SplitPattern { kGpt2, kLlama3 };

// The regex text of a pattern (as tokenizer.json and tiktoken write it).
const char* split_pattern_regex(SplitPattern pattern);
const char* split_pattern_name(SplitPattern pattern);  // "gpt2", "llama3"
// The pattern whose regex is exactly `regex`, or nullopt for a regex this code does not implement.
std::optional<SplitPattern> split_pattern_from_regex(std::string_view regex);

// Length in bytes of the piece that starts at text[i] (i < text.size()).
size_t split_piece_length(SplitPattern pattern, std::string_view text, size_t i);

// Calls emit(std::string_view piece) for each piece of `text`, in order.
template <typename Emit>
void split_pieces(SplitPattern pattern, std::string_view text, Emit&& emit) {
  size_t i = 0;
  while (i < text.size()) {
    const size_t n = split_piece_length(pattern, text, i);
    emit(text.substr(i, n));
    i += n;
  }
}

}  // namespace trillion::data
