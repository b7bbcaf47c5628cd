// The planner proposes only what the engine trains (issue 36): for the tiny dense and MoE run
// configs on 2, 4 and 8 GPUs (and DeepSeek-V3's toy, MLA + MoE, on 4), `trillion plan --json`
// searches every layout (nothing fixed), and each of its top distinct layouts (8; on 4 GPUs all 40
// it ranks) is trained by the engine for a few steps under `trillion launch` with the settings the
// plan prints (its "launch" entry), matching the one-process run within 1e-5 (`trillion compare`).
// A layout the engine refuses is refused by the search with the engine's own message, so --layout
// asking for one says why.
#include <gtest/gtest.h>

#include <set>

#include "../train/cli_util.h"

namespace trillion {
namespace {

using testing::config_path;
using testing::fresh_dir;
using testing::has;
using testing::one_thread_per_rank;
using testing::run_trillion;
using testing::shared_run;

const std::string kEnv = one_thread_per_rank();
constexpr int kSteps = 4;

struct Case {
  std::string config;
  int gpus;
  size_t layouts;  // the plan's first distinct layouts to train (runners-up of 40)
  // Settings of both runs. deepseek-tiny (MoE + MTP + group-limited routing) has head weights
  // whose first-step gradient is ~1e-9: Adam's g / (|g| + 1e-8) turns the sharded sum's last-bit
  // difference into 3.4e-5 of weight (measured at pp 2 x dp 2: losses and gradient norm equal to
  // 3.7e-9 and 2.1e-9), so its runs take eps = 1e-6 (then 1.2e-6).
  std::string settings = "";
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.config << " on " << c.gpus << " GPUs";
}

class PlanConsistency : public ::testing::TestWithParam<Case> {};

TEST_P(PlanConsistency, TheTopLayoutsTrainTheOneProcessRun) {
  const Case c = GetParam();
  const std::string config = config_path(c.config);
  const auto plan = run_trillion("plan --model " + config + " --cluster h100 --gpus " +
                                     std::to_string(c.gpus) + " --top 40 --json",
                                 /*with_stderr=*/false);
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  const auto j = nlohmann::json::parse(plan.output);
  const std::string steps = " --quiet --set train.steps=" + std::to_string(kSteps) + c.settings;
  const std::string reference = shared_run("train " + config + steps);
  std::set<std::vector<std::string>> tried;
  for (const auto& entry : j["ranked"]) {
    if (tried.size() == c.layouts) break;
    const auto settings = entry["launch"]["settings"].get<std::vector<std::string>>();
    if (!tried.insert(settings).second) continue;
    ASSERT_EQ(entry["launch"]["ranks"], c.gpus);
    std::string sets;
    for (const std::string& s : settings) sets += " --set " + s;
    SCOPED_TRACE(sets);
    const std::string dir = fresh_dir("plan_" + std::to_string(tried.size()));
    const auto run = run_trillion(kEnv + "launch -n " + std::to_string(c.gpus) + " -- train " +
                                  config + steps + sets + " --run-dir " + dir);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const auto cmp = run_trillion("compare " + reference + " " + dir + " --tol 1e-5");
    EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
    EXPECT_TRUE(has(cmp.output, "MATCH")) << cmp.output;
  }
  EXPECT_EQ(tried.size(), std::min<size_t>(c.layouts, j["ranked"].size()));
}

INSTANTIATE_TEST_SUITE_P(Configs, PlanConsistency,
                         ::testing::Values(Case{"tiny.toml", 2, 8}, Case{"moe-tiny.toml", 2, 8},
                                           Case{"tiny.toml", 4, 40}, Case{"moe-tiny.toml", 4, 40},
                                           Case{"tiny.toml", 8, 8}, Case{"moe-tiny.toml", 8, 8},
                                           Case{"deepseek-tiny.toml", 4, 8,
                                                " --set optim.eps=1e-6"}),
                         [](const auto& info) {
                           std::string name;  // "moe-tiny.toml" on 4 GPUs: moetiny_4
                           for (char ch : info.param.config.substr(0, info.param.config.find('.')))
                             if (ch != '-') name += ch;
                           return name + "_" + std::to_string(info.param.gpus);
                         });

// A layout the engine refuses is never planned: --layout asking for one is refused with the
// engine's message, and the text plan prints the command that trains its layout.
TEST(PlanConsistency, ALayoutTheEngineRefusesIsNotPlanned) {
  const auto moe_tp = run_trillion("plan --model " + config_path("moe-tiny.toml") +
                                   " --cluster h100 --gpus 4 --layout tp=2,sp=0");
  EXPECT_NE(moe_tp.exit_code, 0) << moe_tp.output;
  EXPECT_TRUE(has(moe_tp.output, "the engine refuses it (its own checks of the run config)"))
      << moe_tp.output;
  EXPECT_TRUE(has(moe_tp.output, "parallel.sp = false and MoE layers")) << moe_tp.output;
  const auto balanced = run_trillion("plan --model " + config_path("tiny.toml") +
                                     " --cluster h100 --gpus 2 --layout pp=2,partition=balanced");
  EXPECT_NE(balanced.exit_code, 0) << balanced.output;
  EXPECT_TRUE(has(balanced.output, "the engine has no partition=balanced")) << balanced.output;
  const auto text = run_trillion("plan --model " + config_path("tiny.toml") +
                                 " --cluster h100 --gpus 2 --layout dp=2,micro_batch=1");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_TRUE(has(text.output, "Launch    trillion launch -n 2 -- train " +
                                   config_path("tiny.toml") +
                                   " --set parallel.dp=2 --set parallel.zero=1 --set "
                                   "model.recompute="))
      << text.output;
  EXPECT_TRUE(has(text.output, "--set train.micro_batch=2 --set train.grad_accum=2"))
      << text.output;
}

}  // namespace
}  // namespace trillion
