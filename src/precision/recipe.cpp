// See recipe.h. The recipes' numbers are the papers': DeepSeek-V3 §3.3.1-3.3.2 (fp8), OCP MX 1.0
// §6.3 (mxfp4), NVIDIA's NVFP4 pre-training report 2509.25149 §4 (nvfp4; its bf16 blocks §4.1 and
// appendix A.1, mxfp4's §5 and appendix A.2).
#include "precision/recipe.h"

#include <fmt/format.h>

#include "core/error.h"
#include "precision/hadamard.h"

namespace trillion::precision {

namespace {

std::vector<Recipe> make_recipes() {
  Recipe fp32{"fp32", Rounding::none, {}, {}, {}, 4};
  Recipe bf16{"bf16", Rounding::bf16, {}, {}, {}, 2};
  Recipe fp8{"fp8", Rounding::block_scaled, {}, {}, {}, 2};
  fp8.activation = {MiniFormat::e4m3, Scaling::kAmax, 1, 128, false};
  fp8.weight = {MiniFormat::e4m3, Scaling::kAmax, 128, 128, false};
  fp8.gradient = {MiniFormat::e4m3, Scaling::kAmax, 1, 128, false};
  Recipe mx{"mxfp4", Rounding::block_scaled, {}, {}, {}, 2};
  mx.activation = {MiniFormat::e2m1, Scaling::kMx, 1, 32, false};
  mx.weight = {MiniFormat::e2m1, Scaling::kMx, 1, 32, false};
  mx.gradient = {MiniFormat::e2m1, Scaling::kMx, 1, 32, true};
  Recipe nv{"nvfp4", Rounding::block_scaled, {}, {}, {}, 2};
  nv.activation = {MiniFormat::e2m1, Scaling::kNvfp4, 1, 16, false};
  nv.weight = {MiniFormat::e2m1, Scaling::kNvfp4, 16, 16, false};
  nv.gradient = {MiniFormat::e2m1, Scaling::kNvfp4, 1, 16, true};
  nv.wgrad_hadamard = 16;
  // 2509.25149 appendix A.1 (the 12B model: first 2 and last 8 of 62 blocks) and A.2 (the 8B
  // MXFP4 and NVFP4 runs: last 8 of 52).
  nv.bf16_blocks = {2, 8, 62};
  mx.bf16_blocks = {0, 8, 52};
  return {fp32, bf16, fp8, mx, nv};
}

const std::vector<Recipe>& recipes() {
  static const std::vector<Recipe> r = make_recipes();
  return r;
}

}  // namespace

const std::vector<std::string>& recipe_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const Recipe& r : recipes()) n.push_back(r.name);
    return n;
  }();
  return names;
}

const Recipe& recipe_named(const std::string& name) {
  for (const Recipe& r : recipes()) {
    if (r.name == name) return r;
  }
  std::string names;
  for (const std::string& n : recipe_names()) names += (names.empty() ? "" : ", ") + n;
  throw Error(fmt::format("unknown precision recipe '{}' (recipes: {})", name, names));
}

Recipe recipe_with(const std::string& name, int64_t wgrad_hadamard) {
  Recipe r = recipe_named(name);
  if (wgrad_hadamard == kRecipeDefault) return r;
  if (wgrad_hadamard != 0 && r.rounding != Rounding::block_scaled) {
    throw Error(fmt::format(
        "wgrad_hadamard = {} needs a block-scaled recipe (fp8, mxfp4, nvfp4), but '{}' rounds "
        "element by element; set it to 0",
        wgrad_hadamard, name));
  }
  if (wgrad_hadamard != 0) RandomHadamard(wgrad_hadamard, 0);  // throws for a bad size
  r.wgrad_hadamard = wgrad_hadamard;
  return r;
}

Bf16Blocks resolve_bf16_blocks(const Recipe& r, int64_t n_layers,
                               const std::string& override_text) {
  if (override_text.empty()) return bf16_blocks_for(r.bf16_blocks, n_layers);
  const Bf16Blocks b = parse_bf16_blocks(override_text);
  if (!b.none() && r.rounding != Rounding::block_scaled) {
    throw Error(fmt::format(
        "bf16_blocks = \"{}\" needs a block-scaled recipe (fp8, mxfp4, nvfp4), but '{}' has no "
        "lower precision to keep blocks out of; set it to \"none\"",
        override_text, r.name));
  }
  if (b.first + b.last > n_layers) {
    throw Error(fmt::format(
        "bf16_blocks = \"{}\" keeps {} blocks in bf16, but the model has {} (model.n_layers); "
        "the first and last counts together may be at most {}",
        override_text, b.first + b.last, n_layers, n_layers));
  }
  return b;
}

std::string planner_precision(const Recipe& r) {
  if (r.rounding == Rounding::none) return "";
  if (r.rounding == Rounding::bf16) return "bf16";
  return r.activation.format == MiniFormat::e4m3 ? "fp8" : "fp4";
}

EngineRecipe engine_recipe_for_plan(const std::string& planner_precision, int grad_bytes,
                                    int moment_bytes) {
  EngineRecipe e;
  e.grad_dtype = grad_bytes == 2 ? "bf16" : "fp32";
  if (planner_precision == "fp16") {
    e.note =
        "precision fp16 has no engine recipe (the engine has no fp16 with loss scaling; "
        "--precision bf16 plans one it trains)";
    return e;
  }
  if (moment_bytes != 4) {
    e.note = fmt::format(
        "moments=bf16 has no engine recipe (AdamW keeps fp32 moments, 12 bytes/parameter of "
        "master and moments; the plan counts {})",
        4 + 2 * moment_bytes);
    return e;
  }
  if (planner_precision == "bf16" || planner_precision == "fp8") {
    e.recipe = planner_precision;
  } else if (planner_precision == "fp4") {
    e.recipe = "nvfp4";
  } else {
    throw Error(fmt::format("no planner precision '{}' (bf16, fp16, fp8, fp4)", planner_precision));
  }
  e.note = fmt::format("[precision] recipe = \"{}\"{}, grad_dtype = \"{}\"", e.recipe,
                       e.recipe == "nvfp4" ? " (or \"mxfp4\")" : "", e.grad_dtype);
  return e;
}

}  // namespace trillion::precision
