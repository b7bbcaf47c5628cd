// The memory plan (train/memory_check.h) against what the engine holds, for every precision
// recipe x ZeRO stage x precision.grad_dtype that configs/tiny.toml accepts: a StepRunner is
// built on this process's dp group, trains one step, and the tracker's current bytes per
// category (the state a rank keeps between steps) must equal the plan's weights, gradients and
// optimizer exactly. Shared by the one-process test (tests/train) and the dp 2 one under mpirun
// (tests/parallel).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "precision/recipe.h"
#include "train/memory_check.h"
#include "train/run_config.h"
#include "train/step_runner.h"

namespace trillion::testing {

// "--set" lists of every case at data parallelism `dp` that the config accepts (all recipes x
// ZeRO 0-3 x grad_dtype fp32 and bf16, bf16 gradients needing a recipe).
inline std::vector<std::vector<std::string>> precision_memory_cases(int dp) {
  std::vector<std::vector<std::string>> cases;
  for (const std::string& recipe : precision::recipe_names()) {
    for (int zero = 0; zero <= 3; ++zero) {
      for (const std::string grad : {"fp32", "bf16"}) {
        std::vector<std::string> set{
            "precision.recipe=\"" + recipe + "\"", "precision.grad_dtype=\"" + grad + "\"",
            "parallel.zero=" + std::to_string(zero), "parallel.dp=" + std::to_string(dp),
            "parallel.bucket_mb=0.02"};
        try {
          load_run_config(std::string(TRILLION_SOURCE_DIR) + "/configs/tiny.toml", set);
        } catch (const Error&) {
          continue;  // refused with its one line (recipe fp32 with bf16 gradients)
        }
        cases.push_back(set);
      }
    }
  }
  return cases;
}

inline std::string describe_case(const std::vector<std::string>& set) {
  std::string s;
  for (const std::string& kv : set) s += (s.empty() ? "" : " ") + kv;
  return s;
}

// Builds and steps the engine for configs/`config` with `set` on `dp` (nullptr: one process) and
// compares.
inline void expect_plan_equals_engine(const std::vector<std::string>& set, comm::Communicator* dp,
                                      const std::string& config = "tiny.toml") {
  SCOPED_TRACE(config + " " + describe_case(set));
  const RunConfig c = load_run_config(std::string(TRILLION_SOURCE_DIR) + "/configs/" + config, set);
  const MemoryPlan plan = plan_process_memory(c);
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  StepRunner runner(c, *be, tracker, dp);
  runner.init_parameters(c.train.seed);
  const int64_t V = c.model.vocab_size;
  const int rank = dp ? dp->rank() : 0;
  runner.step(0, [&](int64_t, int64_t micro, int32_t* tokens, int32_t* targets) {
    const int64_t n = c.train.micro_batch / c.parallel.dp * c.model.seq_len;
    for (int64_t i = 0; i < n; ++i) {
      tokens[i] = static_cast<int32_t>((7 * i + 13 * rank + 5 * micro) % V);
      targets[i] = static_cast<int32_t>((3 * i + 11 * rank + 1) % V);
    }
  });
  EXPECT_EQ(plan.weights, static_cast<double>(tracker.current(MemoryCategory::parameters)));
  EXPECT_EQ(plan.gradients, static_cast<double>(tracker.current(MemoryCategory::gradients)));
  EXPECT_EQ(plan.optimizer, static_cast<double>(tracker.current(MemoryCategory::optimizer)));
}

}  // namespace trillion::testing
