// See byte_level.h.
#include "data/byte_level.h"

#include <array>

#include "data/unicode_classes.h"

namespace trillion::data {

namespace {
bool printable(int c) {
  return (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
}

const std::array<uint32_t, 256> kCodePoints = [] {
  std::array<uint32_t, 256> table{};
  int n = 0;
  for (int b = 0; b < 256; ++b) table[b] = printable(b) ? b : 256 + n++;
  return table;
}();

// Inverse over U+0000..U+0143 (the largest code point used is U+0100 + 67); -1 = not in it.
const std::array<int16_t, 0x144> kBytes = [] {
  std::array<int16_t, 0x144> table{};
  table.fill(-1);
  for (int b = 0; b < 256; ++b) table[kCodePoints[b]] = static_cast<int16_t>(b);
  return table;
}();
}  // namespace

uint32_t byte_level_code_point(unsigned char b) {
  return kCodePoints[b];
}

std::string byte_level_char(unsigned char b) {
  const uint32_t cp = kCodePoints[b];
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

std::string byte_level_string(std::string_view bytes) {
  std::string s;
  s.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) s += byte_level_char(b);
  return s;
}

std::optional<std::string> byte_level_decode(std::string_view text) {
  std::string bytes;
  for (size_t i = 0; i < text.size();) {
    const CodePoint cp = decode_utf8(text, i);
    if (cp.value >= kBytes.size() || kBytes[cp.value] < 0) return std::nullopt;
    bytes += static_cast<char>(kBytes[cp.value]);
    i += cp.length;
  }
  return bytes;
}

}  // namespace trillion::data
