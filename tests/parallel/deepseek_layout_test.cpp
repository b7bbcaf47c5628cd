// DeepSeek-V3's architecture at toy size (configs/deepseek-tiny.toml: MLA with query compression
// and v_head_dim != qk head dim, a dense layer then MoE layers with a shared expert, the sigmoid
// router's bias and group-limited routing, n_group 4 / topk_group 2: the groups are by expert
// index, so ep 2 routes as one process) under the layouts that run it, against its one-process
// run (6 steps): dp 2 x ep 2 (ZeRO-1, 2 and 3), dp 2 ZeRO-2, pp 2 under 1F1B and DualPipe,
// pp 2 x dp 2 x ep 2, dp 4 x ep 4 (one group of 2 experts per rank).
// Losses and final weights within 1e-5 (`trillion compare`), and each rank's parameter, gradient
// and optimizer bytes are plan/'s (rank_model_states of params_of_rank of the layout's pipeline
// shape: experts split over ep, dense states sharded over dp and expert ones over dp / ep, the
// routing biases whole under ZeRO-3). Without the group limit the one-process run differs, so
// the limit takes part.
#include <gtest/gtest.h>

#include "../train/cli_util.h"
#include "plan/memory.h"
#include "schedule/action.h"
#include "train/run_config.h"

namespace trillion {
namespace {

using testing::config_path;
using testing::fresh_dir;
using testing::one_thread_per_rank;
using testing::read_json;
using testing::run_trillion;
using testing::shared_run;

const std::string kEnv = one_thread_per_rank();

std::string flags() {
  return "train " + config_path("deepseek-tiny.toml") +
         " --quiet --set train.steps=6 --set train.grad_accum=4";
}

struct Layout {
  std::string name;
  int ranks, pp, dp, ep, zero;
  std::string schedule;
};
void PrintTo(const Layout& l, std::ostream* os) {
  *os << l.name;
}

class DeepSeekLayout : public ::testing::TestWithParam<Layout> {};

TEST_P(DeepSeekLayout, TrainsTheOneProcessRun) {
  const Layout l = GetParam();
  const std::string ref = shared_run(kEnv + flags());
  const std::string run = fresh_dir("deepseek_" + l.name);
  const auto r = run_trillion(
      kEnv + "launch -n " + std::to_string(l.ranks) + " -- " + flags() + " --run-dir " + run +
      " --set parallel.pp=" + std::to_string(l.pp) + " --set parallel.dp=" + std::to_string(l.dp) +
      " --set parallel.ep=" + std::to_string(l.ep) +
      " --set parallel.zero=" + std::to_string(l.zero) + " --set parallel.schedule=" + l.schedule);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto cmp = run_trillion("compare " + ref + " " + run + " --tol 1e-5");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;

  const RunConfig config = load_run_config(config_path("deepseek-tiny.toml"), {});
  const plan::ModelSpec spec = config.model.spec();
  plan::Layout pl;
  pl.pp = l.pp, pl.dp = l.dp, pl.ep = l.ep, pl.zero = l.zero;
  pl.schedule = schedule::parse_schedule_kind(l.schedule);
  const plan::PipelineShape shape = plan::pipeline_shape(spec, pl);
  const auto summary = read_json(run + "/summary.json");
  for (int rank = 0; rank < l.ranks; ++rank) {
    const int p = rank / l.dp;  // the mesh: dp fastest below pp (tp = cp = 1)
    const plan::LocalParams held = plan::params_of_rank(spec, pl, shape, p);
    const plan::ModelStates states =
        plan::rank_model_states(held, l.zero, l.dp, l.dp / l.ep, 4, 4, 8);
    const auto& current = summary["memory_per_rank"][rank]["current"];
    EXPECT_EQ(current["parameters"].get<double>(), states.parameters) << "rank " << rank;
    EXPECT_EQ(current["gradients"].get<double>(), states.gradients) << "rank " << rank;
    EXPECT_EQ(current["optimizer"].get<double>(), states.optimizer) << "rank " << rank;
  }
}

// The layouts above exercise the group limit: the one-process run without it (n_group =
// topk_group = 1) is another run (measured: losses 2.5e-4, weights 2.3e-2 apart after 6 steps).
TEST(DeepSeekGroups, TheOneProcessRunWithoutTheGroupLimitDiffers) {
  const std::string ref = shared_run(kEnv + flags());
  const std::string run = fresh_dir("deepseek_no_groups");
  const auto r = run_trillion(kEnv + flags() + " --run-dir " + run +
                              " --set model.n_group=1 --set model.topk_group=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto cmp = run_trillion("compare " + ref + " " + run + " --tol 1e-5");
  EXPECT_NE(cmp.exit_code, 0) << cmp.output;
  EXPECT_TRUE(testing::has(cmp.output, "DIFFER")) << cmp.output;
}

INSTANTIATE_TEST_SUITE_P(Layouts, DeepSeekLayout,
                         ::testing::Values(Layout{"dp2_ep2", 2, 1, 2, 2, 1, "1f1b"},
                                           Layout{"dp2_zero2", 2, 1, 2, 1, 2, "1f1b"},
                                           Layout{"dp2_ep2_zero2", 2, 1, 2, 2, 2, "1f1b"},
                                           Layout{"dp2_ep2_zero3", 2, 1, 2, 2, 3, "1f1b"},
                                           Layout{"pp2_1f1b", 2, 2, 1, 1, 1, "1f1b"},
                                           Layout{"pp2_dualpipe", 2, 2, 1, 1, 1, "dualpipe"},
                                           Layout{"pp2_dp2_ep2", 4, 2, 2, 2, 1, "1f1b"},
                                           Layout{"dp4_ep4", 4, 1, 4, 4, 1, "1f1b"}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace trillion
