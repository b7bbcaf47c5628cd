// Silent data corruption (issue 19): a bit flipped in one replica's parameters is found by the
// next replica check and named; with on_divergence = rollback the run goes back to the last
// checkpoint the check vouches for and finishes bitwise equal to an undisturbed run.
#include <gtest/gtest.h>

#include <fstream>

#include "../train/cli_util.h"

namespace trillion {
namespace {

using testing::config_path;
using testing::fresh_dir;
using testing::run_shell;
using testing::run_trillion;
using testing::shared_run;
using testing::has;
using testing::one_thread_per_rank;

const std::string kEnv = one_thread_per_rank();

std::string flags(int dp) {
  return "train " + config_path("tiny.toml") + " --quiet --set train.steps=6" +
         " --set train.checkpoint_every=2 --set guard.replica_check_every=2" +
         " --set parallel.dp=" + std::to_string(dp);
}

TEST(ReplicaCheck, AFlippedBitInOneOfTwoReplicasStopsTheRunAtTheNextCheck) {
  const std::string dir = fresh_dir("replica_flip");
  const auto r = run_shell("TRILLION_FLIP_PARAMETER_BIT=1:3 " + std::string(TRILLION_BINARY) +
                           " launch -n 2 -- " + flags(2) + " --run-dir " + dir + " 2>&1");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output,
                  "error: replica check after step 4 (pipeline rank 0): dp ranks 0, 1 "
                  "hold different parameters (first: 'embed')"))
      << r.output;
  // The checkpoint of step 4 (after the flip) is not written; step 2's is there.
  EXPECT_TRUE(std::filesystem::exists(dir + "/checkpoints/step_00000002"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/checkpoints/step_00000004"));
}

TEST(ReplicaCheck, RollbackAfterAFaultFinishesBitwiseAsTheUndisturbedRun) {
  const std::string ref = shared_run(kEnv + "launch -n 2 -- " + flags(2));
  const std::string dir = fresh_dir("replica_rollback");
  const auto r = run_shell("TRILLION_FLIP_PARAMETER_BIT=0:3 " + std::string(TRILLION_BINARY) +
                           " launch -n 2 -- " + flags(2) +
                           " --set guard.on_divergence=\"rollback\" --run-dir " + dir + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(dir + "/events.log");
  const std::string events((std::istreambuf_iterator<char>(in)), {});
  EXPECT_TRUE(has(events,
                  "rolled back to the checkpoint of step 2 (1 of 3): replica check after "
                  "step 4"))
      << events;
  const auto cmp = run_trillion("compare " + ref + " " + dir + " --tol 0");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
  EXPECT_TRUE(has(cmp.output, "(bitwise equal)")) << cmp.output;
}

TEST(ReplicaCheck, WithFourReplicasTheOddOneIsNamedUnderZero1) {
  const auto r = run_shell("TRILLION_FLIP_PARAMETER_BIT=2:1 " + std::string(TRILLION_BINARY) +
                           " launch -n 4 -- " + flags(4) +
                           " --set parallel.zero=1 --set guard.replica_check_every=1 --run-dir " +
                           fresh_dir("replica_four") + " 2>&1");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output,
                  "replica check after step 1 (pipeline rank 0): dp rank(s) 2 hold "
                  "parameters that differ from the other 3 replica(s) (first: 'embed')"))
      << r.output;
}

}  // namespace
}  // namespace trillion
