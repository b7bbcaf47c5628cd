// See bf16_blocks.h.
#include "precision/bf16_blocks.h"

#include <fmt/format.h>

#include <cctype>

#include "core/error.h"

namespace trillion::precision {

namespace {

// round(count * n / of), halves up, in integers.
int64_t scaled(int64_t count, int64_t n, int64_t of) {
  return (2 * count * n + of) / (2 * of);
}

std::string range_text(int64_t lo, int64_t hi) {  // inclusive
  return lo == hi ? fmt::format("{}", lo) : fmt::format("{}-{}", lo, hi);
}

[[noreturn]] void refuse(const std::string& text, const std::string& why) {
  throw Error(fmt::format(
      "bf16_blocks = \"{}\": {}; expected \"first:N,last:M\" (either part alone, N and M whole "
      "numbers of blocks), or \"none\"",
      text, why));
}

}  // namespace

Bf16Blocks bf16_blocks_for(const Bf16BlockRule& rule, int64_t n_layers) {
  if (rule.of <= 0 || n_layers <= 0) return {};
  return {scaled(rule.first, n_layers, rule.of), scaled(rule.last, n_layers, rule.of)};
}

Bf16Blocks parse_bf16_blocks(const std::string& text) {
  if (text == "none") return {};
  Bf16Blocks b;
  bool seen_first = false, seen_last = false;
  size_t pos = 0;
  while (true) {
    const size_t comma = text.find(',', pos);
    const std::string part =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    const size_t colon = part.find(':');
    if (colon == std::string::npos) refuse(text, fmt::format("'{}' has no ':'", part));
    const std::string key = part.substr(0, colon), value = part.substr(colon + 1);
    if (value.empty() || value.size() > 9) {
      refuse(text, fmt::format("'{}' needs a count of blocks after ':'", part));
    }
    for (char c : value) {
      if (!std::isdigit(static_cast<unsigned char>(c))) {
        refuse(text, fmt::format("'{}' is not a whole number", value));
      }
    }
    const int64_t n = std::stoll(value);
    if (key == "first" && !seen_first) {
      b.first = n, seen_first = true;
    } else if (key == "last" && !seen_last) {
      b.last = n, seen_last = true;
    } else if (key == "first" || key == "last") {
      refuse(text, fmt::format("'{}' is given twice", key));
    } else {
      refuse(text, fmt::format("unknown part '{}'", key));
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return b;
}

std::string bf16_blocks_text(const Bf16Blocks& b) {
  return fmt::format("first:{},last:{}", b.first, b.last);
}

bool in_bf16_blocks(const Bf16Blocks& b, int64_t layer, int64_t n_layers) {
  return layer >= 0 && (layer < b.first || layer >= n_layers - b.last);
}

std::string describe_bf16_blocks(const Bf16Blocks& b, int64_t n_layers) {
  if (b.none()) return fmt::format("none of {} blocks", n_layers);
  std::string s = b.first + b.last == 1 ? "block " : "blocks ";
  if (b.first > 0) s += range_text(0, b.first - 1);
  if (b.first > 0 && b.last > 0) s += " and ";
  if (b.last > 0) s += range_text(n_layers - b.last, n_layers - 1);
  return s + fmt::format(" ({} of {})", b.first + b.last, n_layers);
}

}  // namespace trillion::precision
