// Precision recipes under ZeRO 1-3 (issue 14): the fp32 master and Adam moments are sharded over
// dp, each rank updates its shard, and the bf16 compute copy is all-gathered (ZeRO 1-2) or kept
// sharded and gathered per unit before use (ZeRO-3) — parallel/mixed_weights.h. For each case,
// dp 2 with ZeRO k against dp 2 with ZeRO 0 of the same recipe (configs/tiny.toml, 4 steps):
// - `trillion compare --tol 0`: the losses and final weights are bitwise equal. Every stage
//   computes from the same bf16 weights (bf16 of the same master values); over two ranks a
//   reduction is one commutative fp32 addition, whichever collective does it; the clip factor
//   is 1 (optim.grad_clip is not reached), so the shards' partial norm sums cannot move a
//   weight; AdamW's update is element by element, the same on a shard as on the whole.
// - every rank's parameter, gradient and optimizer bytes, at ZeRO k and in the ZeRO-0 reference,
//   equal plan::zero_model_states of the recipe's layout (2-byte weights, 4- or 2-byte gradients as
//   precision.grad_dtype says, 12 optimizer bytes) exactly;
// - the bytes each step sends over dp equal plan/'s ring formula per collective: the gradients
//   reduce-scattered once (P (n-1)/n x 4, or x 2 in bf16), the bf16 weights all-gathered once
//   after the update (ZeRO 1-2: P (n-1)/n x 2) or per unit before every forward and backward
//   (ZeRO-3: 2 P (n-1)/n x 2); the ZeRO-0 reference all-reduces twice the gradient share.
// bf16 gradients are bitwise too: each rank rounds its micro-batch's gradients to bf16 once, and
// the two ranks' bf16 values are added and rounded once, by the all-reduce or the reduce-scatter.
#include <gtest/gtest.h>

#include "../train/cli_util.h"
#include "plan/collectives.h"
#include "plan/hardware.h"
#include "plan/layout.h"
#include "plan/memory.h"
#include "precision/recipe.h"

namespace trillion {
namespace {

using testing::config_path;
using testing::fresh_dir;
using testing::one_thread_per_rank;
using testing::read_json;
using testing::read_metrics;
using testing::run_trillion;
using testing::shared_run;

constexpr int64_t kParams = 22688;  // configs/tiny.toml
constexpr int kRanks = 2;
const std::string kEnv = one_thread_per_rank();

struct Case {
  std::string recipe;
  int zero;
  std::string grad_dtype = "fp32";
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.recipe << "_zero" << c.zero << "_grad_" << c.grad_dtype;
}

std::string dp2_args(const Case& c, int zero) {
  return kEnv + "launch -n 2 -- train " + config_path("tiny.toml") +
         " --quiet --set train.steps=4 --set parallel.bucket_mb=0.02 --set parallel.dp=2" +
         " --set precision.recipe=" + c.recipe + " --set precision.grad_dtype=" + c.grad_dtype +
         " --set parallel.zero=" + std::to_string(zero);
}

// Bytes one rank sends in a ring reduce-scatter or all-gather of `bytes` over the dp group.
double ring_bytes(double bytes) {
  plan::Topology t;
  t.ranks_per_node = kRanks;
  t.intra = {1e-6, 1e9};
  t.inter = t.intra;
  return plan::ring_reduce_scatter_cost(bytes, t).bytes_per_rank;
}

class PrecisionZero : public ::testing::TestWithParam<Case> {};

TEST_P(PrecisionZero, ShardedMasterTrainsTheZero0RunWithPlansBytes) {
  const Case c = GetParam();
  const std::string ref = shared_run(dp2_args(c, 0));
  ASSERT_EQ(read_metrics(ref).size(), 4u) << "the ZeRO-0 reference did not run";
  const std::string run =
      fresh_dir("precision_zero_" + c.recipe + std::to_string(c.zero) + c.grad_dtype);
  const auto r = run_trillion(dp2_args(c, c.zero) + " --run-dir " + run);
  ASSERT_EQ(r.exit_code, 0) << r.output;

  const auto cmp = run_trillion("compare " + ref + " " + run + " --tol 0");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;

  const precision::Recipe& recipe = precision::recipe_named(c.recipe);
  plan::Layout layout;
  layout.precision = plan::parse_precision(precision::planner_precision(recipe));
  layout.zero = c.zero;
  layout.grad_bytes = c.grad_dtype == "bf16" ? 2 : 4;
  const double P = kParams;
  // The run at ZeRO k and its ZeRO-0 reference, each rank: plan/'s model states of its stage.
  for (const auto& [dir, zero] : {std::pair{run, c.zero}, std::pair{ref, 0}}) {
    const plan::ModelStates f = plan::zero_model_states(
        P, zero, kRanks, recipe.weight_bytes, layout.grad_bytes, layout.optimizer_bytes());
    const auto summary = read_json(dir + "/summary.json");
    ASSERT_EQ(summary["memory_per_rank"].size(), static_cast<size_t>(kRanks));
    for (const auto& rank : summary["memory_per_rank"]) {
      EXPECT_EQ(rank["current"]["parameters"].get<double>(), f.parameters) << zero << rank;
      EXPECT_EQ(rank["current"]["gradients"].get<double>(), f.gradients) << zero << rank;
      EXPECT_EQ(rank["current"]["optimizer"].get<double>(), f.optimizer) << zero << rank;
    }
  }

  const double gradients = ring_bytes(P * layout.grad_bytes);
  const double weights = ring_bytes(P * recipe.weight_bytes) * (c.zero == 3 ? 2 : 1);
  for (const auto& m : read_metrics(run)) {
    const auto& dp = m["comm"]["dp"];
    EXPECT_EQ(dp["reduce_scatter"].get<double>(), gradients) << m;
    EXPECT_EQ(dp["all_gather"].get<double>(), weights) << m;
  }
  // The ZeRO-0 reference all-reduces the same gradient bytes (reduce-scatter + all-gather), plus
  // the loss and norm scalars.
  for (const auto& m : read_metrics(ref)) {
    const double all_reduce = m["comm"]["dp"]["all_reduce"].get<double>();
    EXPECT_GE(all_reduce, 2 * gradients) << m;
    EXPECT_LE(all_reduce, 2 * gradients + 64) << m;
  }
}

// Every recipe at ZeRO 1-3, and bf16 gradients with bf16, fp8 and nvfp4 (the fp4 recipes'
// stochastic rounding draws the same stream on a rank whatever the ZeRO stage: it is keyed by the
// step and the GEMM, and each rank's micro-batch is the same).
std::vector<Case> cases() {
  std::vector<Case> all;
  for (const char* recipe : {"bf16", "fp8", "mxfp4", "nvfp4"}) {
    for (int zero : {1, 2, 3}) all.push_back({recipe, zero});
  }
  for (const char* recipe : {"bf16", "fp8", "nvfp4"}) {
    for (int zero : {1, 2, 3}) all.push_back({recipe, zero, "bf16"});
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Recipes, PrecisionZero, ::testing::ValuesIn(cases()), [](const auto& i) {
  return i.param.recipe + "_zero" + std::to_string(i.param.zero) + "_grad_" + i.param.grad_dtype;
});

}  // namespace
}  // namespace trillion
