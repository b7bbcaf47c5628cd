// Unicode classes and UTF-8 decoding for the pre-tokenizer regexes of existing tokenizers
// (GPT-2's and Llama 3's use \p{L}, \p{N} and \s). The ranges are generated from the Unicode
// Character Database by scripts/gen_unicode_classes.py into unicode_classes.inc. Invariants: a
// code point is in at most one of letter / number / white space; decode_utf8 never reads past
// the text and turns every byte that does not start a valid sequence into one code point of
// class kOther (so splitting any bytes covers them exactly).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace trillion::data {

enum class CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

struct CodePoint {
  uint32_t value = 0;   // kInvalidCodePoint for a byte that is not valid UTF-8
  uint32_t length = 0;  // bytes, >= 1
  CharClass cls = CharClass::kOther;
};
constexpr uint32_t kInvalidCodePoint = 0xFFFFFFFF;

CharClass char_class(uint32_t code_point);
// The code point starting at text[i] (i < text.size()), with its class.
CodePoint decode_utf8(std::string_view text, size_t i);
// Length of the valid UTF-8 sequence at text[i] (RFC 3629), 0 when the bytes are not one.
size_t utf8_sequence_length(std::string_view text, size_t i);
// Offset of the first byte that is not valid UTF-8, or text.size() when all of it is.
size_t first_invalid_utf8(std::string_view text);
// The Unicode version the class table was generated from.
const char* unicode_version();

}  // namespace trillion::data
