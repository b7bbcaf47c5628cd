// Splits raw bytes into chunks ("words") before BPE, in the spirit of GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with byte classes instead of Unicode ones: ASCII letters and every byte >= 0x80 are letters
// (so UTF-8 text stays inside words), 0-9 digits, ASCII whitespace spaces, the rest punctuation.
// Invariants: the chunks concatenate to the input exactly, for any bytes; no chunk is longer
// than kMaxChunkBytes (longer runs are cut), which bounds BPE's per-chunk cost.
#pragma once

#include <string_view>
#include <vector>

namespace trillion::data {

constexpr size_t kMaxChunkBytes = 256;

// Calls `emit(std::string_view chunk)` for each chunk of `text`, in order.
template <typename Emit>
void pretokenize(std::string_view text, Emit&& emit);

std::vector<std::string_view> pretokenize(std::string_view text);

// ---- implementation -----------------------------------------------------------------------

namespace detail {
enum class ByteClass : unsigned char { kLetter, kDigit, kSpace, kOther };
inline ByteClass classify(unsigned char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80) return ByteClass::kLetter;
  if (c >= '0' && c <= '9') return ByteClass::kDigit;
  if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') {
    return ByteClass::kSpace;
  }
  return ByteClass::kOther;
}
// Length of the chunk starting at text[0] (text non-empty), before the length cap.
size_t chunk_length(std::string_view text);
}  // namespace detail

template <typename Emit>
void pretokenize(std::string_view text, Emit&& emit) {
  while (!text.empty()) {
    size_t length = detail::chunk_length(text);
    if (length > kMaxChunkBytes) length = kMaxChunkBytes;
    emit(text.substr(0, length));
    text.remove_prefix(length);
  }
}

}  // namespace trillion::data
