// The early memory check: its plan equals what the engine allocates for a one-process run (so
// it is a true lower bound, not a guess), ZeRO divides the categories it shards, and a run that
// cannot fit is refused by bytes before any allocation or file.
#include "train/memory_check.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "cli_util.h"
#include "plan/model_spec.h"
#include "train/run_config.h"

namespace trillion {
namespace {

using testing::config_path;
using testing::fresh_dir;
using testing::read_json;
using testing::run_trillion;
namespace fs = std::filesystem;

TEST(MemoryCheck, PlanEqualsTheEngineAllocationOfAOneProcessRun) {
  const std::string dir = fresh_dir("memory_plan");
  const auto r = run_trillion("train " + config_path("tiny.toml") + " --quiet --run-dir " + dir +
                              " --set train.steps=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const RunConfig c = load_run_config(config_path("tiny.toml"), {"train.steps=2"});
  const MemoryPlan p = plan_process_memory(c);
  const auto memory = read_json(dir + "/summary.json")["memory"];
  EXPECT_EQ(p.weights, memory["parameters"].get<double>());
  EXPECT_EQ(p.gradients, memory["gradients"].get<double>());
  EXPECT_EQ(p.optimizer, memory["optimizer"].get<double>());
  EXPECT_EQ(p.activations, memory["activations"].get<double>());
  EXPECT_EQ(p.weights, 4.0 * static_cast<double>(plan::count_model(c.model.spec()).total));
  EXPECT_EQ(p.data, 4.0 * static_cast<double>(c.data.tokens + c.data.val_tokens));
  fs::remove_all(dir);
}

TEST(MemoryCheck, ZeroStagesAndPipelineStagesDivideWhatTheyShard) {
  const RunConfig one = load_run_config(config_path("tiny.toml"), {});
  const MemoryPlan base = plan_process_memory(one);
  auto plan = [](const std::vector<std::string>& set) {
    return plan_process_memory(load_run_config(config_path("tiny.toml"), set));
  };
  const MemoryPlan z1 = plan({"parallel.dp=2", "parallel.zero=1"});
  EXPECT_EQ(z1.optimizer, base.optimizer / 2);
  EXPECT_EQ(z1.gradients, base.gradients);
  const MemoryPlan z3 = plan({"parallel.dp=4", "parallel.zero=3"});
  EXPECT_EQ(z3.weights, base.weights / 4);
  EXPECT_EQ(z3.gradients, base.gradients / 4);
  EXPECT_EQ(plan({"parallel.pp=2"}).weights, base.weights / 2);
  // Under cp, ZeRO shards over dp x cp (the group gradients reduce over).
  const MemoryPlan cp = plan({"parallel.dp=2", "parallel.cp=2", "parallel.zero=1"});
  EXPECT_EQ(cp.optimizer, base.optimizer / 4);
  EXPECT_EQ(cp.weights, base.weights);
}

TEST(MemoryCheck, ExpertStatesShardOverTheRanksHoldingTheSameExperts) {
  auto plan = [](const std::vector<std::string>& set) {
    return plan_process_memory(load_run_config(config_path("moe-tiny.toml"), set));
  };
  const RunConfig c = load_run_config(config_path("moe-tiny.toml"), {});
  const plan::ModelCounts counts = plan::count_model(c.model.spec());
  const double dense = static_cast<double>(counts.dense_total),
               experts = static_cast<double>(counts.routed_total);
  EXPECT_EQ(plan({}).weights, 4 * (dense + experts));
  // dp 2 x cp 2, ep 2: experts halve over ep; ZeRO-1 shards the dense moments over 4 ranks and
  // the experts' over the 2 ranks holding the same experts.
  const MemoryPlan p = plan({"parallel.dp=2", "parallel.cp=2", "parallel.ep=2", "parallel.zero=1"});
  EXPECT_EQ(p.weights, 4 * (dense + experts / 2));
  EXPECT_EQ(p.optimizer, 8 * (dense / 4 + experts / 2 / 2));
}

TEST(MemoryCheck, ARunThatCannotFitIsRefusedByBytesBeforeAnything) {
  const std::string dir = fresh_dir("memory_refused");
  // 16,000 layers of width 4096: about 3.2e12 parameters, 51 TB of model state.
  const auto r = run_trillion("train " + config_path("tiny.toml") + " --run-dir " + dir +
                              " --set model.n_layers=16000 --set model.d_model=4096"
                              " --set model.n_heads=32 --set model.ffn_hidden=16384");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("trillion train: error: out of memory: the run needs at least"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("TB (data"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--allow-oversubscribe-memory"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir));
  // A dimension past any model is a config error naming the key, not an overflow.
  const auto big = run_trillion("train " + config_path("tiny.toml") + " --run-dir " + dir +
                                " --set model.n_layers=1000000000");
  EXPECT_EQ(big.exit_code, 2) << big.output;
  EXPECT_NE(big.output.find("model.n_layers = 1000000000 exceeds 2^14"), std::string::npos)
      << big.output;
  EXPECT_FALSE(fs::exists(dir));
}

}  // namespace
}  // namespace trillion
