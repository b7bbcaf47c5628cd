// Step guards (issue 19): a non-finite loss or gradient norm, or a loss spike, skips the update
// and leaves the state as it was; max_skips in a row stop the run with one message, or roll it
// back to the newest checkpoint; no checkpoint is ever written from a skip streak, so the last
// good one survives retention.
#include "train/guard.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "core/error.h"
#include "train/run_config.h"

namespace trillion {
namespace {

using testing::config_path;
using testing::fresh_dir;
using testing::run_trillion;
using testing::has;
using testing::read_metrics;
namespace fs = std::filesystem;

std::vector<std::string> checkpoints(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir + "/checkpoints")) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(StepGuard, NonFiniteLossOrNormIsRefusedAndStreaksCount) {
  GuardConfig c;
  c.max_skips = 3;
  StepGuard g(c);
  EXPECT_EQ(g.judge(2.0, 1.0), StepVerdict::kAccept);
  EXPECT_EQ(g.judge(std::nan(""), 1.0), StepVerdict::kNonFinite);
  EXPECT_EQ(g.judge(2.0, INFINITY), StepVerdict::kNonFinite);
  EXPECT_EQ(g.judge(-INFINITY, 1.0), StepVerdict::kNonFinite);
  for (int i = 0; i < 2; ++i) g.record(StepVerdict::kNonFinite, std::nan(""));
  EXPECT_EQ(g.consecutive_skips(), 2);
  EXPECT_FALSE(g.diverged());
  g.record(StepVerdict::kAccept, 2.0);  // an accepted step ends the streak
  EXPECT_EQ(g.consecutive_skips(), 0);
  for (int i = 0; i < 3; ++i) g.record(StepVerdict::kNonFinite, std::nan(""));
  EXPECT_TRUE(g.diverged());
  EXPECT_EQ(g.total_skips(), 5);
  EXPECT_EQ(g.explain(StepVerdict::kNonFinite, -std::nan(""), 1.5),
            "loss nan and gradient norm 1.5: not finite");
}

TEST(StepGuard, SpikeIsJudgedAgainstAFullWindowOfAcceptedLosses) {
  GuardConfig c;
  c.spike_zscore = 6;
  c.spike_window = 4;
  StepGuard g(c);
  // Losses 3.0, 3.2, 3.0, 3.2: mean 3.1, sample standard deviation 0.11547.
  for (double loss : {3.0, 3.2, 3.0}) {
    EXPECT_EQ(g.judge(100.0, 1.0), StepVerdict::kAccept) << "window not full yet";
    g.record(StepVerdict::kAccept, loss);
  }
  g.record(StepVerdict::kAccept, 3.2);
  // z = (loss - 3.1) / 0.11547: 6 sigma is 3.79282.
  EXPECT_EQ(g.judge(3.79, 1.0), StepVerdict::kAccept);
  EXPECT_EQ(g.judge(3.80, 1.0), StepVerdict::kSpike);
  EXPECT_EQ(g.judge(1.0, 1.0), StepVerdict::kAccept);  // a fall is never a spike
  EXPECT_TRUE(has(g.explain(StepVerdict::kSpike, 3.8, 1.0), "6.1 standard deviations above"));
  // A skipped spike does not enter the window: the next spike is judged against the same.
  g.record(StepVerdict::kSpike, 3.8);
  EXPECT_EQ(g.judge(3.80, 1.0), StepVerdict::kSpike);
}

TEST(StepGuard, ConfigValuesAreRangeChecked) {
  const std::string tiny = config_path("tiny.toml");
  auto refused = [&](const std::string& set, const std::string& message) {
    try {
      load_run_config(tiny, {set});
      ADD_FAILURE() << set << " was accepted";
    } catch (const Error& e) {
      EXPECT_TRUE(has(e.what(), message)) << e.what();
    }
  };
  refused("guard.max_skips=0", "guard.max_skips = 0 must be >= 1");
  refused("guard.spike_zscore=nan", "guard.spike_zscore = nan must be a finite number >= 0");
  refused("guard.on_divergence=\"retry\"", "guard.on_divergence = 'retry': expected stop or");
  refused("guard.spike_window=1", "guard.spike_window = 1 must be >= 2");
  try {
    load_run_config(tiny, {"guard.replica_check_every=5", "parallel.dp=2", "parallel.zero=3"});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "parallel.zero = 3 shards them")) << e.what();
  }
}

// lr = 1e30 from step 5 of a healthy run: step 5's update destroys the model, steps 6.. are
// non-finite and skipped, five in a row stop the run with exit 2; the checkpoints of steps 2 and
// 4 are what is left (none is written in the streak, so retention deletes no good one).
TEST(StepGuard, Lr1e30StopsTheRunAndKeepsTheLastGoodCheckpoint) {
  const std::string dir = fresh_dir("guard_lr");
  const std::string base = "train " + config_path("tiny.toml") + " --quiet --run-dir " + dir +
                           " --set train.checkpoint_every=2 --set train.keep_checkpoints=2";
  ASSERT_EQ(run_trillion(base + " --set train.steps=4").exit_code, 0);
  const auto before = checkpoints(dir);
  ASSERT_EQ(before, (std::vector<std::string>{"step_00000002", "step_00000004"}));
  const auto r = run_trillion(base + " --resume --set train.steps=20 --set optim.lr=1e30");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output,
                  "trillion train: error: training diverged: 5 consecutive steps up to "
                  "step 10 skipped their update"))
      << r.output;
  EXPECT_TRUE(has(r.output, "guard.on_divergence = \"stop\"")) << r.output;
  EXPECT_EQ(checkpoints(dir), before);
  const auto lines = read_metrics(dir);
  ASSERT_EQ(lines.size(), 10u);
  EXPECT_FALSE(lines[4].contains("update_skipped"));  // step 5: finite, applied
  for (size_t i = 5; i < 10; ++i) {
    EXPECT_EQ(lines[i]["update_skipped"], "non_finite") << "step " << i + 1;
  }
  // The good checkpoint resumes (back at the config's lr) and the run finishes.
  const auto again = run_trillion(base + " --resume --set train.steps=6");
  EXPECT_EQ(again.exit_code, 0) << again.output;
  fs::remove_all(dir);
}

// on_divergence = rollback: each divergence reloads the newest checkpoint (step 4) and skips
// the batches that led there; with lr still 1e30 it diverges again, and after max_rollbacks
// the run stops.
TEST(StepGuard, RollbackReloadsTheNewestCheckpointUntilMaxRollbacks) {
  const std::string dir = fresh_dir("guard_rollback");
  const std::string base = "train " + config_path("tiny.toml") + " --quiet --run-dir " + dir +
                           " --set train.checkpoint_every=2";
  ASSERT_EQ(run_trillion(base + " --set train.steps=4").exit_code, 0);
  const auto r = run_trillion(base +
                              " --resume --set train.steps=40 --set optim.lr=1e30"
                              " --set guard.on_divergence=\"rollback\" --set guard.max_rollbacks=2"
                              " --set guard.max_skips=2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "2 rollback(s) of guard.max_rollbacks = 2 were used")) << r.output;
  std::ifstream in(dir + "/events.log");
  const std::string events((std::istreambuf_iterator<char>(in)), {});
  EXPECT_TRUE(has(events, "rolled back to the checkpoint of step 4 (1 of 2)")) << events;
  EXPECT_TRUE(has(events, "rolled back to the checkpoint of step 4 (2 of 2)")) << events;
  // Step 5 is applied, 6 and 7 skipped -> back to 4, on at step 8 (applied and checkpointed,
  // 9 and 10 skipped) -> back to 4 again, not to 8: step 9 showed that 8's state is the one
  // that fails -> on at 11 (applied, 12 and 13 skipped) -> stop.
  EXPECT_TRUE(has(events, "training goes on at step 8, so the batches of steps 5..7 are skipped"))
      << events;
  EXPECT_TRUE(has(events,
                  "training goes on at step 11, so the batches of steps 5..10 are "
                  "skipped"))
      << events;
  EXPECT_TRUE(has(r.output, "up to step 13 skipped")) << r.output;
  EXPECT_EQ(checkpoints(dir), (std::vector<std::string>{"step_00000004", "step_00000008"}));
  fs::remove_all(dir);
}

// Issue 39 item 13: the advice after a divergence named optim.lr whatever the cause, and pointed a
// run without checkpoints to a checkpoints directory that did not exist. Now it names the setting
// far outside its usual range, and a run without a checkpoint is told to start again.
TEST(StepGuard, DivergenceAdviceNamesTheLikelyKey) {
  const std::string dir = fresh_dir("guard_advice");
  const std::string base = "train " + config_path("markov.toml") + " --quiet --set train.steps=8";
  auto r = run_trillion(base + " --run-dir " + dir + "/std --set model.init_std=1e30");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "This run has no checkpoint yet (" + dir +
                                "/std/checkpoints holds none): the likely cause: model.init_std "
                                "= 1e+30 (usual 0.02"))
      << r.output;
  EXPECT_TRUE(has(r.output, "then start it again (a new --run-dir, or remove " + dir + "/std)"))
      << r.output;
  EXPECT_FALSE(has(r.output, "lower optim.lr")) << r.output;
  r = run_trillion(base + " --run-dir " + dir + "/wd --set optim.weight_decay=1e30");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "the likely cause: optim.weight_decay = 1e+30 (usual 0.1")) << r.output;
}

// Issue 39 item 14: a run whose last steps skipped their update (a streak shorter than
// guard.max_skips when train.steps came) exited 0, "completed": true, with a dead model. It is a
// failure with the reason, and summary.json says it did not complete.
TEST(StepGuard, ARunEndingInsideASkipStreakFails) {
  const std::string dir = fresh_dir("guard_streak_end");
  const auto r = run_trillion("train " + config_path("markov.toml") + " --quiet --run-dir " + dir +
                              " --set train.steps=3 --set optim.lr=1e30"
                              " --set guard.on_divergence=\"rollback\"");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "error: the run ended inside a streak of 2 skipped update(s) (steps "
                            "2..3; guard.max_skips = 5 was not reached before train.steps): its "
                            "final state is not trusted and was not checkpointed"))
      << r.output;
  EXPECT_EQ(testing::read_json(dir + "/summary.json")["completed"], false);
  EXPECT_FALSE(fs::exists(dir + "/checkpoints/step_00000003"));
}

// Issue 39 item 21: train.steps = 0 logged "steps 1..0"; a warmup longer than the run was silent.
TEST(RunStart, NoStepsAndAWarmupBeyondTheRunAreSaid) {
  const std::string dir = fresh_dir("run_start_said");
  const std::string base = "train " + config_path("markov.toml") + " --quiet --run-dir " + dir;
  ASSERT_EQ(run_trillion(base + "/zero --set train.steps=0").exit_code, 0);
  EXPECT_TRUE(has(testing::slurp(dir + "/zero/events.log"),
                  "for no step (train.steps = 0: the model as initialised is written as "
                  "checkpoint step 0)"));
  ASSERT_EQ(run_trillion(base + "/warm --set train.steps=2 --set optim.warmup_steps=1000000")
                .exit_code,
            0);
  EXPECT_TRUE(has(testing::slurp(dir + "/warm/events.log"),
                  "warning: optim.warmup_steps = 1000000 is beyond train.steps = 2: the learning "
                  "rate never reaches optim.lr = 0.01 (it ends at 2e-06 of it)"));
}

}  // namespace
}  // namespace trillion
