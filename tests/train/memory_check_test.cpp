// The early memory check: its plan equals what the engine allocates for a one-process run (so
// it is a true lower bound, not a guess), ZeRO divides the categories it shards, and a run that
// cannot fit is refused by bytes before any allocation or file.
#include "train/memory_check.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "cli_util.h"
#include "memory_plan_cases.h"
#include "plan/activation_memory.h"
#include "plan/context_ring.h"
#include "plan/model_spec.h"
#include "train/run_config.h"

namespace trillion {
namespace {

using testing::config_path;
using testing::fresh_dir;
using testing::read_json;
using testing::run_trillion;
using testing::shared_run;
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
  // pp 2: the busiest stage, layer 1 + the final norm + the head (9280 + 32 + 64 x 32), not half.
  EXPECT_EQ(plan({"parallel.pp=2"}).weights, 4.0 * (9280 + 32 + 64 * 32));
  EXPECT_EQ(base.weights, 4.0 * 22688);
  // Under cp, ZeRO shards over dp x cp (the group gradients reduce over).
  const MemoryPlan cp = plan({"parallel.dp=2", "parallel.cp=2", "parallel.zero=1"});
  EXPECT_EQ(cp.optimizer, base.optimizer / 4);
  EXPECT_EQ(cp.weights, base.weights);
}

// Every recipe (fp32, bf16, fp8, mxfp4, nvfp4) x ZeRO 0-3 x grad_dtype in one process: the plan
// is what the engine holds (the dp 2 cases: tests/parallel/memory_plan_mpi_test.cpp).
TEST(MemoryCheck, PlanEqualsTheEngineStateForEveryRecipeZeroStageAndGradDtype) {
  const auto cases = testing::precision_memory_cases(1);
  EXPECT_EQ(cases.size(), 36u);  // 5 recipes x 4 stages x fp32 gradients, 4 x 4 with bf16 ones
  for (const auto& set : cases) testing::expect_plan_equals_engine(set, nullptr);
  // The recipes' own bytes: bf16 weights beside an fp32 master among the optimizer state.
  auto plan = [](const std::vector<std::string>& set) {
    return plan_process_memory(load_run_config(config_path("tiny.toml"), set));
  };
  const double P = 22688;
  const MemoryPlan bf16 = plan({"precision.recipe=\"bf16\"", "precision.grad_dtype=\"bf16\""});
  EXPECT_EQ(bf16.weights, 2 * P);
  EXPECT_EQ(bf16.gradients, 2 * P);
  EXPECT_EQ(bf16.optimizer, 12 * P);
  const MemoryPlan nvfp4 = plan({"precision.recipe=\"nvfp4\"", "parallel.dp=2", "parallel.zero=3"});
  EXPECT_EQ(nvfp4.weights, 2 * P / 2);
  EXPECT_EQ(nvfp4.gradients, 4 * P / 2);
  EXPECT_EQ(nvfp4.optimizer, 12 * P / 2);
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
  // A recipe on a MoE model keeps the fp32 master whole in the model's buffer (optimizer bytes,
  // never sharded) and a bf16 copy of it, with the moments sharded as usual: what the engine holds.
  for (const std::string zero : {"0", "1"}) {
    testing::expect_plan_equals_engine({"precision.recipe=\"bf16\"", "parallel.zero=" + zero},
                                       nullptr, "moe-tiny.toml");
  }
  const MemoryPlan bf16 = plan({"precision.recipe=\"bf16\""});
  EXPECT_EQ(bf16.weights, 2 * (dense + experts));
  EXPECT_EQ(bf16.optimizer, (4 + 8) * (dense + experts));
}

// Under context parallelism the plan keeps the activations (of T/cp rows of every sequence) and
// adds ring attention's K/V blocks: what a cp 2 run (the reshard test's reference) holds on each
// rank, its peak activations and the ring buffers among its workspace.
TEST(MemoryCheck, ContextParallelActivationsAndRingBuffersArePlanned) {
  auto plan = [](const std::vector<std::string>& set) {
    return plan_process_memory(load_run_config(config_path("tiny.toml"), set));
  };
  const MemoryPlan one = plan({}), cp = plan({"parallel.cp=2"});
  EXPECT_EQ(one.context, 0.0);
  EXPECT_GT(cp.activations, 0.0);
  EXPECT_LT(cp.activations, one.activations);
  const RunConfig c = load_run_config(config_path("tiny.toml"), {"parallel.cp=2"});
  // 2 K/V + 3 dK/dV blocks of B 4 x T/cp 16 x 2 x KV 2 x HD 8 fp32 values.
  EXPECT_EQ(cp.context, 5.0 * 4 * 16 * 2 * 2 * 8 * 4);
  EXPECT_EQ(cp.context, static_cast<double>(plan::context_ring_buffer_bytes(
                            c.model.spec(), 4, 32, 4, {1, c.parallel.sp, 2})));
  const std::string run =
      shared_run("launch -n 2 -- train " + config_path("tiny.toml") +
                 " --quiet --set train.steps=6 --set train.checkpoint_every=3 --set parallel.cp=2");
  const auto ranks = read_json(run + "/summary.json")["memory_per_rank"];
  ASSERT_EQ(ranks.size(), 2u);
  for (const auto& rank : ranks) {
    EXPECT_EQ(rank["peak"]["activations"].get<double>(), cp.activations) << rank;
    EXPECT_GE(rank["current"]["workspace"].get<double>(), cp.context) << rank;
  }
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
