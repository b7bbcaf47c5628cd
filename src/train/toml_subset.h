// The subset of TOML a run config may use, checked on the raw text before toml++ parses it:
// [section] headers and key = scalar lines, no control characters, and none of the code points
// toml++ 3.3.0 cannot read safely. Invariant: text that passes never reaches a toml++ code path
// with undefined behaviour (see check_toml_subset's comment for the fuzz findings).
#pragma once

#include <string>
#include <string_view>

namespace trillion {

// Throws trillion::Error naming source:line and the offending line or character.
void check_toml_subset(std::string_view text, const std::string& source);

}  // namespace trillion
