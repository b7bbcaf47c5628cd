// The deepseek_v3 export of MLA models (interop/hf_deepseek.h): Hugging Face transformers' own
// DeepseekV3ForCausalLM (tests/interop/hf_deepseek_check.py, run by .venv-tests' Python) loads the
// exported directories of a dense MLA model without query compression, one with query
// compression and an MTP module (tied embeddings), and deepseek-tiny (MLA + MoE with a non-zero
// routing bias) with no missing, unexpected or mismatched weights and no warnings, and computes
// trillion's logits at every position within 1e-4 (f32); the same export with the RoPE rows left
// in trillion's order (TRILLION_EXPORT_WRONG_ROPE_LAYOUT) is caught by that comparison. Without
// Python: the names, the row permutation and config.json fields, and import back bitwise.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "../train/cli_util.h"
#include "interop/hf_deepseek.h"
#include "interop/safetensors.h"
#include "tiny_run.h"

namespace trillion {
namespace {

using testing::make_tiny_run;
using testing::run_shell;
using testing::run_trillion;
using testing::TinyRun;

const std::vector<int32_t> kIds = {3, 17, 42, 8, 63, 0, 29, 11, 5, 50};

// Gives every router bias of the model values of +-0.1 (init leaves them 0), so the export of
// e_score_correction_bias and HF's use of it in the choice of experts are exercised.
void spread_router_biases(Transformer& model) {
  for (const TensorSpec& s : model.table().specs()) {
    if (!s.name.ends_with("moe.router_bias")) continue;
    float* b = model.parameter_set().param(s.name).data<float>();
    for (int64_t i = 0; i < s.numel(); ++i) b[i] = static_cast<float>(0.1 * std::sin(3.0 * i + 1));
  }
}

// The models under test: configs/deepseek-tiny.toml with overrides.
struct Case {
  const char* name;
  std::vector<std::string> overrides;
};
const Case kDenseNoQ = {"dense_q0", {"model.n_routed_experts=0", "model.q_lora_rank=0"}};
const Case kDenseMtp = {
    "dense_mtp", {"model.n_routed_experts=0", "model.mtp_depth=1", "model.tied_embeddings=true"}};
const Case kMoe = {"moe", {}};

TinyRun make_case(const std::string& root, const Case& c) {
  std::vector<std::string> o = c.overrides;
  o.push_back("model.init_std=0.2");
  return make_tiny_run(root + "/" + c.name, o, "deepseek-tiny.toml", spread_router_biases);
}

std::string export_dir(const TinyRun& run, const std::string& out, const std::string& env = "") {
  const auto r = run_trillion("export --checkpoint " + run.dir + " --out " + out, true, env);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return out;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b, double* largest) {
  double d = 0;
  *largest = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, std::abs(a[i] - b[i]));
    *largest = std::max(*largest, std::abs(a[i]));
  }
  return d;
}

TEST(DeepSeekV3Export, HuggingFaceLoadsItWithoutWarningsAndGivesTrillionsLogits) {
  const std::string python = std::string(TRILLION_SOURCE_DIR) + "/.venv-tests/bin/python";
  if (run_shell(python + " -c 'import torch, transformers' 2>/dev/null").exit_code != 0)
    GTEST_SKIP() << "torch and transformers are not installed in " << python
                 << " (scripts/setup.sh installs them; it skips them without network)";
  const std::string root = testing::fresh_dir("ds_hf");
  std::map<std::string, TinyRun> runs;
  std::string dirs;
  for (const Case& c : {kDenseNoQ, kDenseMtp, kMoe}) {
    runs.emplace(c.name, make_case(root, c));
    dirs += " " + export_dir(runs.at(c.name), root + "/" + c.name + "_hf");
  }
  // deepseek-tiny's checkpoint again, its rope rows written in trillion's (halves) order.
  dirs += " " + export_dir(runs.at("moe"), root + "/moe_wrong_rope_hf",
                           "TRILLION_EXPORT_WRONG_ROPE_LAYOUT=1 ");
  std::string ids;
  for (int32_t id : kIds) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  const auto r = run_shell(python + " " + TRILLION_SOURCE_DIR +
                           "/tests/interop/hf_deepseek_check.py " + ids + dirs + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto hf = nlohmann::json::parse(r.output.substr(r.output.rfind("\n{") + 1));

  auto check = [&](const std::string& run, const std::string& dir, double* diff) {
    SCOPED_TRACE(dir);
    const auto& h = hf.at(root + "/" + dir);
    EXPECT_EQ(h["architecture"], "DeepseekV3Config");
    EXPECT_EQ(h["missing"], nlohmann::json::array());
    EXPECT_EQ(h["unexpected"], nlohmann::json::array());
    EXPECT_EQ(h["mismatched"], nlohmann::json::array());
    EXPECT_EQ(h["warnings"], nlohmann::json::array());
    std::vector<double> theirs;
    for (const auto& row : h["logits"]) {
      const auto v = row.get<std::vector<double>>();
      theirs.insert(theirs.end(), v.begin(), v.end());
    }
    const TinyRun& t = runs.at(run);
    const std::vector<double> ours = testing::full_logits(t.cfg, t.dir, kIds);
    ASSERT_EQ(theirs.size(), ours.size());
    double largest = 0;
    *diff = max_abs_diff(theirs, ours, &largest);
    std::printf(
        "%-22s HF DeepseekV3ForCausalLM vs trillion, f32, %zu logits: max |diff| %.3g "
        "(largest logit %.3g)\n",
        dir.c_str(), ours.size(), *diff, largest);
    EXPECT_GT(largest, 0.1);  // the logits are not trivially small
  };
  for (const Case& c : {kDenseNoQ, kDenseMtp, kMoe}) {
    double diff = 0;
    check(c.name, std::string(c.name) + "_hf", &diff);
    EXPECT_LT(diff, 1e-4) << c.name;
  }
  // The wrong layout loads just as quietly; only the numbers show it, and they do.
  double wrong = 0;
  check("moe", "moe_wrong_rope_hf", &wrong);
  EXPECT_GT(wrong, 1e-2);
}

}  // namespace
}  // namespace trillion
