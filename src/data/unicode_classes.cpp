// See unicode_classes.h. ASCII is classified by a table; other code points by binary search in
// the generated ranges.
#include "data/unicode_classes.h"

#include <algorithm>
#include <array>

namespace trillion::data {

namespace {
struct CodePointRange {
  uint32_t first, last;
};
#include "data/unicode_classes.inc"

template <size_t N>
bool in_ranges(const CodePointRange (&ranges)[N], uint32_t cp) {
  const auto* it =
      std::upper_bound(std::begin(ranges), std::end(ranges), cp,
                       [](uint32_t v, const CodePointRange& r) { return v < r.first; });
  return it != std::begin(ranges) && cp <= (it - 1)->last;
}

CharClass classify_slow(uint32_t cp) {
  if (in_ranges(kLetterRanges, cp)) return CharClass::kLetter;
  if (in_ranges(kNumberRanges, cp)) return CharClass::kNumber;
  if (in_ranges(kWhiteSpaceRanges, cp)) return CharClass::kSpace;
  return CharClass::kOther;
}

const std::array<CharClass, 128> kAscii = [] {
  std::array<CharClass, 128> table{};
  for (uint32_t c = 0; c < 128; ++c) table[c] = classify_slow(c);
  return table;
}();
}  // namespace

CharClass char_class(uint32_t cp) {
  return cp < 128 ? kAscii[cp] : cp == kInvalidCodePoint ? CharClass::kOther : classify_slow(cp);
}

size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = at(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // at most U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size() || at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (at(i + k) < 0x80 || at(i + k) > 0xBF) return 0;
  return n;
}

CodePoint decode_utf8(std::string_view s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return {c, 1, kAscii[c]};
  const size_t n = utf8_sequence_length(s, i);
  if (n == 0) return {kInvalidCodePoint, 1, CharClass::kOther};
  uint32_t cp = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return {cp, static_cast<uint32_t>(n), classify_slow(cp)};
}

size_t first_invalid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) return i;
    i += n;
  }
  return s.size();
}

const char* unicode_version() {
  return kUnicodeVersion;
}

}  // namespace trillion::data
