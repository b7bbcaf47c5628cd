// Precision recipes on a Mixture-of-Experts model across ranks (issue 14 x expert parallelism):
// configs/moe-tiny.toml (1 dense + 2 MoE layers, 8 routed experts top-2 + 1 shared, 4
// micro-batches, 3 steps) with each recipe (bf16, fp8, mxfp4, nvfp4) at dp 2 x ep 2 (ZeRO 0 and
// 1) and cp 2 x ep 2 (ZeRO 1) trains the one-process run of the SAME recipe, and pp 2 (fp8 1F1B,
// nvfp4 ZB-H1) trains it bit for bit:
// - the token-splitting layouts re-tile the wgrad GEMMs (each rank holds fewer tokens of a dense
//   layer, and an expert sees the rows routed to it from its ep group in another order), so they
//   are held to the recipe's bounds (precision_layouts.h: every weight within AdamW's largest
//   move, the RMS weight difference within u times it, each step's loss within the rounding
//   noise's projection on the gradient); a pipeline stage runs whole micro-batches with the
//   rounding stream keyed by the GEMM's site: bitwise;
// - each rank's parameter, gradient and optimizer bytes == plan/'s (plan_process_memory), and,
//   spelled out: a bf16 copy (2 bytes) and fp32 gradients (4) of the rank's dense parameters and
//   its ep share of the experts, the fp32 master of them kept whole in the model (4, the
//   recipe-on-MoE rule) and the two moments (8) sharded by ZeRO-1 over dp x cp for dense tensors
//   and over the dp x cp / ep ranks holding the same experts.
#include <gtest/gtest.h>

#include <algorithm>

#include "model/config.h"
#include "plan/layout.h"
#include "plan/memory.h"
#include "precision_layouts.h"
#include "train/memory_check.h"
#include "train/run_config.h"

namespace trillion {
namespace {

using testing::compare_runs;
using testing::config_path;
using testing::fresh_dir;
using testing::one_thread_per_rank;
using testing::read_json;
using testing::read_metrics;
using testing::run_trillion;
using testing::shared_run;

const std::string kEnv = one_thread_per_rank();
constexpr size_t kSteps = 3;

std::string train_args(const std::string& recipe) {
  return "train " + config_path("moe-tiny.toml") + " --quiet --set train.steps=" +
         std::to_string(kSteps) + " --set train.grad_accum=4 --set precision.recipe=" + recipe;
}

struct Layout {
  std::string recipe, name;
  int dp = 1, cp = 1, ep = 1, pp = 1, zero = 0;
  std::string schedule = "1f1b";
};
void PrintTo(const Layout& l, std::ostream* os) {
  *os << l.recipe << "_" << l.name;
}

std::vector<std::string> sets_of(const Layout& l) {
  return {"parallel.dp=" + std::to_string(l.dp),     "parallel.cp=" + std::to_string(l.cp),
          "parallel.ep=" + std::to_string(l.ep),     "parallel.pp=" + std::to_string(l.pp),
          "parallel.zero=" + std::to_string(l.zero), "parallel.schedule=" + l.schedule};
}

class PrecisionMoe : public ::testing::TestWithParam<Layout> {};

TEST_P(PrecisionMoe, TrainsTheOneProcessRunOfTheRecipe) {
  const Layout l = GetParam();
  const int ranks = l.dp * l.cp * l.pp;
  const std::string ref = shared_run(kEnv + train_args(l.recipe));
  ASSERT_EQ(read_metrics(ref).size(), kSteps) << "the one-process reference did not run";
  const std::string run = fresh_dir("precision_moe_" + l.recipe + "_" + l.name);
  std::string layout;
  for (const std::string& s : sets_of(l)) layout += " --set " + s;
  const auto r = run_trillion(kEnv + "launch -n " + std::to_string(ranks) + " -- " +
                              train_args(l.recipe) + " --run-dir " + run + layout);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  testing::RunDiffs d;
  if (l.pp > 1) {
    d = compare_runs(ref, run, 0);
    EXPECT_EQ(d.exit_code, 0) << d.output;
    EXPECT_TRUE(d.bitwise) << d.output;
  } else {
    d = testing::expect_within_retile_bounds(l.recipe, ref, run, l.recipe == "nvfp4");
  }
  testing::report(l.recipe + " moe " + l.name, d);

  // Model states: plan/'s, on every rank (the busiest stage's under pp).
  std::vector<std::string> sets = sets_of(l);
  sets.push_back("precision.recipe=\"" + l.recipe + "\"");
  const RunConfig c = load_run_config(config_path("moe-tiny.toml"), sets);
  const MemoryPlan plan = plan_process_memory(c);
  const auto summary = read_json(run + "/summary.json");
  ASSERT_EQ(summary["memory_per_rank"].size(), static_cast<size_t>(ranks));
  double most = 0;
  for (const auto& rank : summary["memory_per_rank"]) {
    const auto& now = rank["current"];
    most = std::max(most, now["parameters"].get<double>());
    if (l.pp > 1) continue;
    EXPECT_EQ(now["parameters"].get<double>(), plan.weights) << rank;
    EXPECT_EQ(now["gradients"].get<double>(), plan.gradients) << rank;
    EXPECT_EQ(now["optimizer"].get<double>(), plan.optimizer) << rank;
  }
  EXPECT_EQ(most, plan.weights);
  if (l.pp > 1) return;
  const plan::ModelCounts counts = plan::count_model(c.model.spec());
  const double dense = static_cast<double>(counts.dense_total),
               experts = static_cast<double>(counts.routed_total) / l.ep;
  const int dense_group = l.zero >= 1 ? l.dp * l.cp : 1,
            expert_group = l.zero >= 1 ? l.dp * l.cp / l.ep : 1;
  EXPECT_EQ(plan.weights, 2 * (dense + experts));
  EXPECT_EQ(plan.gradients, 4 * (dense + experts));
  EXPECT_EQ(plan.optimizer,
            4 * (dense + experts) + 8 * (dense / dense_group + experts / expert_group));
}

std::vector<Layout> layouts() {
  std::vector<Layout> all;
  for (const char* recipe : {"bf16", "fp8", "mxfp4", "nvfp4"}) {
    all.push_back({recipe, "dp2_ep2_zero0", 2, 1, 2, 1, 0});
    all.push_back({recipe, "dp2_ep2_zero1", 2, 1, 2, 1, 1});
    all.push_back({recipe, "cp2_ep2_zero1", 1, 2, 2, 1, 1});
  }
  all.push_back({"fp8", "pp2_1f1b", 1, 1, 1, 2, 0, "1f1b"});
  all.push_back({"nvfp4", "pp2_zbh1", 1, 1, 1, 2, 0, "zb-h1"});
  return all;
}

INSTANTIATE_TEST_SUITE_P(Recipes, PrecisionMoe, ::testing::ValuesIn(layouts()),
                         [](const ::testing::TestParamInfo<Layout>& i) {
                           return i.param.recipe + "_" + i.param.name;
                         });

}  // namespace
}  // namespace trillion
