// Plan files: a whole `trillion plan` invocation as TOML (configs/plans/*.toml, compiled in; a
// user's file is read the same way), so published runs can be named and compared:
//
//   [plan]
//   model = "llama3-405b"        # catalog name or model file
//   cluster = "h100"             # catalog name or cluster file
//   gpus = 16384
//   seq = 8192                   # optional: the model's
//   batch_tokens = 16777216      # optional: the model's
//   tokens = 15.6e12             # optional: Chinchilla-optimal
//   layout = "tp=8,cp=1,pp=16,dp=128"   # optional; fields left out are searched
//   precision = "bf16"           # optional: bf16 | fp16 | fp8 | fp4 | any
//   published_gpu_hours = 30.84e6        # optional, with published_source
//
// `trillion plan --compare A B` plans both and prints them side by side.
#pragma once

#include <string>
#include <string_view>

#include "plan/plan.h"

namespace trillion::plan {

struct PlanFile {
  std::string name;
  std::string description;
  PlanInputs inputs;
  double published_gpu_hours = 0;  // 0: none
  std::string published_source;
};

PlanFile parse_plan_toml(std::string_view text, std::string_view source);
// A catalog name (configs/plans/NAME.toml) or a path.
PlanFile resolve_plan(const std::string& name_or_path);

// Both plans side by side: layout, memory, step, MFU, days, GPU-hours (and published), cost,
// failures, and the GPU-hours ratio A/B.
std::string format_comparison(const PlanFile& a, const Plan& pa, const PlanFile& b, const Plan& pb);

}  // namespace trillion::plan
