// See regex_split.h. Each function below is one alternative of the regex, tried in the regex's
// order; the whitespace alternatives share one scan of the whitespace run.
#include "data/regex_split.h"

#include "data/unicode_classes.h"

namespace trillion::data {

namespace {
constexpr const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

bool is_newline(uint32_t cp) {
  return cp == '\r' || cp == '\n';
}

// Case-insensitive single letters of the contractions (Unicode simple case folding: U+017F LONG
// S folds to 's').
uint32_t fold(uint32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if (cp == 0x17F) return 's';
  return cp;
}

// 's|'t|'re|'ve|'m|'ll|'d at i (text[i] == '\''): bytes matched, 0 if none.
size_t contraction(std::string_view text, size_t i, bool ignore_case) {
  size_t p = i + 1;
  uint32_t c[2] = {0, 0};
  size_t end[2] = {p, p};
  for (int k = 0; k < 2 && p < text.size(); ++k) {
    const CodePoint cp = decode_utf8(text, p);
    c[k] = ignore_case ? fold(cp.value) : cp.value;
    p += cp.length;
    end[k] = p;
  }
  if (c[0] == 's' || c[0] == 't' || c[0] == 'm' || c[0] == 'd') return end[0] - i;
  if ((c[0] == 'r' && c[1] == 'e') || (c[0] == 'v' && c[1] == 'e') ||
      (c[0] == 'l' && c[1] == 'l')) {
    return end[1] - i;
  }
  return 0;
}

// End of the run of code points of class `cls` starting at p, at most `limit` of them.
size_t run_end(std::string_view text, size_t p, CharClass cls, size_t limit = SIZE_MAX) {
  for (size_t count = 0; p < text.size() && count < limit; ++count) {
    const CodePoint cp = decode_utf8(text, p);
    if (cp.cls != cls) break;
    p += cp.length;
  }
  return p;
}

// \s*[\r\n]+ (when `newline_alternative`), then \s+(?!\S), then \s+ at i (text[i] is white).
size_t whitespace(std::string_view text, size_t i, bool newline_alternative) {
  size_t p = i, last_start = i, after_newline = 0;
  while (p < text.size()) {
    const CodePoint cp = decode_utf8(text, p);
    if (cp.cls != CharClass::kSpace) break;
    last_start = p;
    p += cp.length;
    if (is_newline(cp.value)) after_newline = p;
  }
  if (newline_alternative && after_newline != 0) return after_newline - i;
  if (p == text.size()) return p - i;         // \s+(?!\S) at the end
  if (last_start > i) return last_start - i;  // all but the last, which precedes a non-space
  return p - i;                               // \s+ of one code point
}

size_t gpt2_piece(std::string_view text, size_t i) {
  if (text[i] == '\'') {
    if (const size_t n = contraction(text, i, false)) return n;
  }
  size_t p = i;
  CodePoint cp = decode_utf8(text, p);
  if (cp.value == ' ' && p + 1 < text.size()) {
    const CodePoint next = decode_utf8(text, p + 1);
    if (next.cls != CharClass::kSpace) {  // ' ?' followed by a letter, number or other
      p += 1;
      cp = next;
    }
  }
  if (cp.cls != CharClass::kSpace) return run_end(text, p, cp.cls) - i;
  return whitespace(text, i, false);
}

size_t llama3_piece(std::string_view text, size_t i) {
  if (text[i] == '\'') {
    if (const size_t n = contraction(text, i, true)) return n;
  }
  const CodePoint cp = decode_utf8(text, i);
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (cp.cls == CharClass::kLetter) return run_end(text, i, CharClass::kLetter) - i;
  if (cp.cls != CharClass::kNumber && !is_newline(cp.value) && i + cp.length < text.size() &&
      decode_utf8(text, i + cp.length).cls == CharClass::kLetter) {
    return run_end(text, i + cp.length, CharClass::kLetter) - i;
  }
  // \p{N}{1,3}
  if (cp.cls == CharClass::kNumber) return run_end(text, i, CharClass::kNumber, 3) - i;
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  size_t p = i;
  if (cp.value == ' ' && i + 1 < text.size() && decode_utf8(text, i + 1).cls == CharClass::kOther) {
    p = i + 1;
  }
  if (p > i || cp.cls == CharClass::kOther) {
    p = run_end(text, p, CharClass::kOther);
    while (p < text.size() && is_newline(static_cast<unsigned char>(text[p]))) ++p;
    return p - i;
  }
  return whitespace(text, i, true);
}
}  // namespace

const char* split_pattern_regex(SplitPattern pattern) {
  return pattern == SplitPattern::kGpt2 ? kGpt2Regex : kLlama3Regex;
}

const char* split_pattern_name(SplitPattern pattern) {
  return pattern == SplitPattern::kGpt2 ? "gpt2" : "llama3";
}

std::optional<SplitPattern> split_pattern_from_regex(std::string_view regex) {
  if (regex == kGpt2Regex) return SplitPattern::kGpt2;
  if (regex == kLlama3Regex) return SplitPattern::kLlama3;
  return std::nullopt;
}

size_t split_piece_length(SplitPattern pattern, std::string_view text, size_t i) {
  return pattern == SplitPattern::kGpt2 ? gpt2_piece(text, i) : llama3_piece(text, i);
}

}  // namespace trillion::data
