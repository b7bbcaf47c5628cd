// Helpers of `trillion plan`: parsing token counts with K/M/B/T suffixes and the plan's JSON
// form (model files are read by plan/model_file.h).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "plan/plan.h"

namespace trillion::cli {

// "16777216", "16M", "15.6T", "1.5e13" -> a count; throws naming the option.
double parse_count(const std::string& text, const std::string& option);

nlohmann::json plan_to_json(const plan::Plan& p);

}  // namespace trillion::cli
