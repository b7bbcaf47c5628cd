// A bound on TOML key nesting, checked on the text before a TOML parser sees it: the parser
// recurses once per dotted-key part, so `a.a.a...` with tens of thousands of parts overflowed the
// stack (SIGSEGV) in every reader of TOML files (run configs, planner model, cluster and plan
// files). No config of this project nests deeper than 4; the bound leaves ample room.
#pragma once

#include <cstdint>
#include <string_view>

namespace trillion {

inline constexpr int kMaxTomlKeyParts = 64;

// Throws Error "SOURCE:LINE: ..." when a key or table header has more than kMaxTomlKeyParts
// dot-separated parts (dots inside quoted key parts do not count).
void check_toml_key_depth(std::string_view text, std::string_view source);

}  // namespace trillion
