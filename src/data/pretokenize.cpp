// See pretokenize.h. Each rule below is one alternative of the GPT-2 pattern, tried in order.
#include "data/pretokenize.h"

namespace trillion::data {

namespace detail {

size_t chunk_length(std::string_view s) {
  const size_t n = s.size();
  auto cls = [&](size_t i) { return classify(static_cast<unsigned char>(s[i])); };
  // Contractions: 's 't 'm 'd 're 've 'll.
  if (s[0] == '\'' && n >= 2) {
    char a = s[1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (n >= 3) {
      std::string_view two = s.substr(1, 2);
      if (two == "re" || two == "ve" || two == "ll") return 3;
    }
  }
  // An optional single space, then a run of letters, of digits, or of punctuation.
  size_t start = (s[0] == ' ' && n >= 2 && cls(1) != ByteClass::kSpace) ? 1 : 0;
  ByteClass run = cls(start);
  if (run != ByteClass::kSpace) {
    size_t end = start + 1;
    while (end < n && cls(end) == run) ++end;
    return end;
  }
  // Whitespace: a run not followed by a non-space keeps its last byte back for the next chunk
  // (so " word" keeps its space), unless the run is a single byte.
  size_t end = 1;
  while (end < n && cls(end) == ByteClass::kSpace) ++end;
  if (end == n || end == 1) return end;
  return end - 1;
}

}  // namespace detail

std::vector<std::string_view> pretokenize(std::string_view text) {
  std::vector<std::string_view> chunks;
  pretokenize(text, [&](std::string_view chunk) { chunks.push_back(chunk); });
  return chunks;
}

}  // namespace trillion::data
