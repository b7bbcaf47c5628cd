// See toml_depth.h.
#include "core/toml_depth.h"

#include <fmt/format.h>

#include "core/error.h"

namespace trillion {

namespace {

// Dots outside quotes in `key` (a line's key before '=' or a [header]'s inside).
int dotted_parts(std::string_view key) {
  int parts = 1;
  char quote = 0;
  for (const char c : key) {
    if (quote != 0) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '.') {
      ++parts;
    }
  }
  return parts;
}

// The key part of a line: a header's inside, or what comes before the first '=' outside quotes.
std::string_view key_of(std::string_view line) {
  const size_t start = line.find_first_not_of(" \t");
  if (start == std::string_view::npos || line[start] == '#') return {};
  line.remove_prefix(start);
  if (line.front() == '[') return line.substr(0, line.find(']'));
  char quote = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    if (quote != 0) {
      if (line[i] == quote) quote = 0;
    } else if (line[i] == '"' || line[i] == '\'') {
      quote = line[i];
    } else if (line[i] == '=') {
      return line.substr(0, i);
    }
  }
  return {};
}

}  // namespace

void check_toml_key_depth(std::string_view text, std::string_view source) {
  int64_t line_number = 0;
  while (!text.empty()) {
    ++line_number;
    const size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    const int parts = dotted_parts(key_of(line));
    if (parts > kMaxTomlKeyParts) {
      throw Error(fmt::format(
          "{}:{}: a key of {} dotted parts nests deeper than the {} levels TOML files here may "
          "use (run configs use 2)",
          source, line_number, parts, kMaxTomlKeyParts));
    }
  }
}

}  // namespace trillion
