// The memory plan at dp 2 (and 4) under mpirun: for every precision recipe x ZeRO stage x
// grad_dtype, each rank's state after one step is exactly the plan's weights, gradients and
// optimizer (plan::zero_model_states of the recipe's bytes over the dp group). The one-process
// cases and the rest of the plan: tests/train/memory_check_test.cpp.
#include <gtest/gtest.h>

#include "../comm/mpi_env.h"
#include "../train/memory_plan_cases.h"

namespace trillion {
namespace {

// MPI comes up once per process, from the environment engine_test.cpp registers in this binary.

TEST(MpiMemoryPlan, PlanEqualsEveryRanksStateForEveryRecipeZeroStageAndGradDtype) {
  REQUIRE_MPI(2);
  comm::Communicator& world = *testing::mpi_world();
  const auto cases = testing::precision_memory_cases(world.size());
  EXPECT_EQ(cases.size(), 36u);
  for (const auto& set : cases) testing::expect_plan_equals_engine(set, &world);
}

}  // namespace
}  // namespace trillion
