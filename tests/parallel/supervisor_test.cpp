// The supervisor (issue 15): `trillion launch --max-restarts K` restarts a job whose rank was
// killed or hung, from the newest valid checkpoint, and the job finishes bitwise equal to an
// undisturbed run; failures and the time they cost are in events.log and summary.json; errors
// that a restart cannot fix are not retried; the fault drills fire once per job.
#include <gtest/gtest.h>

#include <fstream>

#include "../train/cli_util.h"

namespace trillion {
namespace {

using testing::fresh_dir;
using testing::has;
using testing::one_thread_per_rank;
using testing::read_json;
using testing::run_shell;
using testing::run_trillion;
using testing::shared_run;
using testing::slurp;

const std::string kEnv = one_thread_per_rank();

std::string train(const std::string& extra = "") {
  return "train " + testing::config_path("tiny.toml") +
         " --quiet --set parallel.dp=2 --set train.steps=20 --set train.checkpoint_every=4" + extra;
}

void expect_bitwise(const std::string& a, const std::string& b) {
  const auto cmp = run_trillion("compare " + a + " " + b + " --tol 0");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
  EXPECT_TRUE(has(cmp.output, "(bitwise equal)")) << cmp.output;
}

// The kill drill: rank 1 killed after step 5 and rank 0 after step 12 of the 20-step run; the job
// must end 0 and bitwise the clean run at the same layout. Returns its summary.json.
nlohmann::json kill_drill(const std::string& extra, const std::string& dir) {
  const std::string clean = shared_run(kEnv + "launch -n 2 -- " + train(extra));
  const auto r = run_trillion("launch -n 2 --max-restarts 3 --fail-at 5:1 --fail-at 12:0 -- " +
                              train(extra) + " --run-dir " + dir);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  expect_bitwise(clean, dir);
  return read_json(dir + "/summary.json");
}

TEST(Supervisor, TwoKilledRanksRestartAndTheRunIsBitwiseTheCleanOne) {
  for (const std::string zero : {"0", "3"}) {
    const std::string dir = fresh_dir("supervisor_kill_z" + zero);
    const auto s = kill_drill(" --set parallel.zero=" + zero, dir);
    EXPECT_EQ(s["restarts"], 2);
    EXPECT_EQ(s["failures"][0]["rank"], 1);
    EXPECT_EQ(s["failures"][0]["last_step"], 5);
    EXPECT_EQ(s["failures"][0]["resumed_from"], 4);
    EXPECT_EQ(s["failures"][1]["rank"], 0);
    EXPECT_EQ(s["failures"][1]["last_step"], 12);
    EXPECT_GT(s["lost_seconds"].get<double>(), 0);
    EXPECT_GT(s["goodput"].get<double>(), 0);
    EXPECT_LT(s["goodput"].get<double>(), 1);
    const std::string events = slurp(dir + "/events.log");
    EXPECT_TRUE(has(events,
                    "supervisor: restart 1 of 3 after: trillion launch: rank 1 was killed "
                    "by signal 9"))
        << events;
    EXPECT_TRUE(has(events, "supervisor: finished after 2 restart(s)")) << events;
  }
}

// The same drill with the model split over the two ranks instead of replicated: tensor
// parallelism (each rank a half of every matrix) and a two-stage pipeline (each rank one layer).
// The restarted job resumes from the sharded checkpoints and ends bitwise the clean run.
TEST(Supervisor, KilledRanksOfTpAndPpJobsRestartAndTheRunIsBitwiseTheCleanOne) {
  for (const std::string layout : {"tp", "pp"}) {
    const std::string dir = fresh_dir("supervisor_kill_" + layout);
    const auto s = kill_drill(" --set parallel.dp=1 --set parallel." + layout + "=2", dir);
    EXPECT_EQ(s["restarts"], 2) << layout;
    EXPECT_EQ(s["failures"][0]["rank"], 1) << layout;
    EXPECT_EQ(s["failures"][0]["resumed_from"], 4) << layout;
    EXPECT_EQ(s["failures"][1]["rank"], 0) << layout;
    EXPECT_EQ(s["failures"][1]["resumed_from"], 12) << layout;
    const auto layout_json = read_json(dir + "/checkpoints/step_00000020/layout.json");
    EXPECT_EQ(layout_json["writer"][layout], 2) << layout;
    EXPECT_EQ(layout_json["world"], 2) << layout;
  }
}

// With async checkpoints the drill ends bitwise too. Rank 0 dies right after step 12, while the
// checkpoint of step 12 is in flight (it is committed at the earliest after step 13): it never
// counts, and the restart resumes from step 8's, which step 12's save drained and committed.
TEST(Supervisor, TheKillDrillPassesWithAsyncCheckpoints) {
  const std::string dir = fresh_dir("supervisor_kill_async");
  const auto s = kill_drill(" --set parallel.zero=3 --set checkpoint.async=true", dir);
  EXPECT_EQ(s["restarts"], 2);
  EXPECT_EQ(s["failures"][1]["rank"], 0);
  EXPECT_EQ(s["failures"][1]["last_step"], 12);
  EXPECT_EQ(s["failures"][1]["resumed_from"], 8);
  EXPECT_TRUE(s["checkpoints"]["async"].get<bool>());
}

// Two failures before a new checkpoint (rank 1 after step 5, then rank 0 after step 6 of the
// restarted attempt; both resume from step 4): each attempt's lost work counts once, so the job's
// lost time is exactly from the end of step 4 (the newest checkpoint) to the start of the step 5
// that finally stood: the two attempts' work since step 4 and their two restarts, no more.
TEST(Supervisor, TwoFailuresBeforeANewCheckpointCountEachAttemptsLossOnce) {
  const std::string dir = fresh_dir("supervisor_two_failures");
  const auto r = run_trillion("launch -n 2 --max-restarts 3 --fail-at 5:1 --fail-at 6:0 -- " +
                              train() + " --run-dir " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto s = read_json(dir + "/summary.json");
  ASSERT_EQ(s["restarts"], 2);
  EXPECT_EQ(s["failures"][0]["last_step"], 5);
  EXPECT_EQ(s["failures"][0]["resumed_from"], 4);
  EXPECT_EQ(s["failures"][1]["last_step"], 6);
  EXPECT_EQ(s["failures"][1]["resumed_from"], 4);
  double step4_end = 0, step5_start = 0;  // the kept lines: step 4 of attempt 1, 5 of attempt 3
  for (const auto& line : testing::read_metrics(dir)) {
    if (line["step"] == 4) step4_end = line["time"].get<double>();
    if (line["step"] == 5) step5_start = line["time"].get<double>() - line["seconds"].get<double>();
  }
  ASSERT_GT(step4_end, 0);
  ASSERT_GT(step5_start, step4_end);
  const double lost = s["lost_seconds"].get<double>();
  EXPECT_NEAR(s["failures"][0]["lost_seconds"].get<double>() +
                  s["failures"][1]["lost_seconds"].get<double>(),
              lost, 1e-6);
  // Unix times near 1.8e9 s carry ~4e-7 s of rounding per operation: a tolerance of 1e-4 s.
  EXPECT_NEAR(lost, step5_start - step4_end, 1e-4);
}

TEST(Supervisor, AStoppedRankIsNamedWithinTheTimeoutAndTheJobRestarts) {
  const std::string clean = shared_run(kEnv + "launch -n 2 -- " + train());
  const std::string dir = fresh_dir("supervisor_hang");
  const auto r = run_trillion(
      "launch -n 2 --max-restarts 1 --heartbeat-timeout 4 --hang-at 6:1 "
      "-- " +
      train() + " --run-dir " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_bitwise(clean, dir);
  const std::string events = slurp(dir + "/events.log");
  EXPECT_TRUE(has(events, "trillion launch: rank 1 made no progress for ")) << events;
  EXPECT_TRUE(has(events, "s after step 6 (pid ")) << events;
  EXPECT_TRUE(has(events, "is stopped) (heartbeat timeout 4 s)")) << events;
  // Detected within the timeout + 10 s: from the stopped rank's last heartbeat to the watchdog
  // naming it (not before the timeout: the beat must be older than it).
  const auto s = read_json(dir + "/summary.json");
  ASSERT_TRUE(s["failures"][0].contains("detected_seconds")) << s["failures"];
  const double detected = s["failures"][0]["detected_seconds"].get<double>();
  EXPECT_GT(detected, 4.0);
  EXPECT_LE(detected, 4.0 + 10.0);
  EXPECT_LE(detected, s["failures"][0]["lost_seconds"].get<double>());  // lost counts it too
}

TEST(Supervisor, ACorruptCheckpointIsSkippedOnRestart) {
  const std::string clean = shared_run(kEnv + "launch -n 2 -- " + train());
  const std::string dir = fresh_dir("supervisor_corrupt");
  const auto r = run_trillion(
      "launch -n 2 --max-restarts 1 --corrupt-checkpoint 8 --fail-at 9:0 "
      "-- " +
      train() + " --run-dir " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_bitwise(clean, dir);
  const std::string events = slurp(dir + "/events.log");
  EXPECT_TRUE(has(events,
                  "step_00000008 is corrupt (params_r00000.bin checksum mismatch); trying the "
                  "previous one"))
      << events;
  EXPECT_TRUE(has(events, "resumed from " + dir + "/checkpoints/step_00000004 at step 4"))
      << events;
}

// --corrupt-checkpoint twice: steps 8 and 12 are damaged after they are written, rank 0 is killed
// after step 13, and the restart skips both (newest first) and resumes from step 4 (keep = 3
// leaves it there); the supervisor records the step it really resumed from and the run still
// ends bitwise the clean one.
TEST(Supervisor, TwoCorruptCheckpointsAreSkippedOnRestart) {
  const std::string clean = shared_run(kEnv + "launch -n 2 -- " + train());
  const std::string dir = fresh_dir("supervisor_corrupt_twice");
  const auto r = run_trillion(
      "launch -n 2 --max-restarts 1 --corrupt-checkpoint 8 --corrupt-checkpoint 12 --fail-at 13:0 "
      "-- " +
      train(" --set checkpoint.keep=3") + " --run-dir " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_bitwise(clean, dir);
  const std::string events = slurp(dir + "/events.log");
  const size_t twelve = events.find(
      "step_00000012 is corrupt (params_r00000.bin checksum mismatch); trying the previous one");
  const size_t eight = events.find(
      "step_00000008 is corrupt (params_r00000.bin checksum mismatch); trying the previous one");
  ASSERT_NE(twelve, std::string::npos) << events;
  ASSERT_NE(eight, std::string::npos) << events;
  EXPECT_LT(twelve, eight) << events;
  EXPECT_TRUE(has(events, "resumed from " + dir + "/checkpoints/step_00000004 at step 4"))
      << events;
  EXPECT_TRUE(has(events, "supervisor: restart 1 resumed from step 4, not 12")) << events;
  const auto s = read_json(dir + "/summary.json");
  ASSERT_EQ(s["restarts"], 1);
  EXPECT_EQ(s["failures"][0]["last_step"], 13);
  EXPECT_EQ(s["failures"][0]["resumed_from"], 4);
  EXPECT_NEAR(s["lost_seconds"].get<double>(), s["failures"][0]["lost_seconds"].get<double>(),
              1e-9);
}

TEST(Supervisor, RestartsRunOutAndUserErrorsAreNotRetried) {
  const std::string dir = fresh_dir("supervisor_out");
  const auto r = run_trillion("launch -n 2 --max-restarts 1 --fail-at 3:1 --fail-at 6:1 -- " +
                              train() + " --run-dir " + dir);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "supervisor: restart 1 of 1 after")) << r.output;
  EXPECT_TRUE(has(r.output, "trillion launch: rank 1 was killed by signal 9")) << r.output;
  EXPECT_TRUE(has(slurp(dir + "/events.log"), "no restart left (--max-restarts 1)"));
  // A config error fails the same way every time: one attempt, its message, no restart.
  const auto bad = run_trillion("launch -n 2 --max-restarts 3 -- " + train() +
                                " --set optim.lr=-1 --run-dir " + fresh_dir("supervisor_bad"));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_FALSE(has(bad.output, "supervisor: restart")) << bad.output;
  const auto no_dir = run_trillion("launch -n 2 --max-restarts 3 -- bench gemm");
  EXPECT_EQ(no_dir.exit_code, 2) << no_dir.output;
  EXPECT_TRUE(has(no_dir.output, "supervise `train ... --run-dir DIR`")) << no_dir.output;
  const auto bad_flag = run_trillion("launch -n 2 --fail-at 5 -- " + train());
  EXPECT_EQ(bad_flag.exit_code, 2) << bad_flag.output;
  EXPECT_TRUE(has(bad_flag.output, "--fail-at 5: expected STEP:RANK")) << bad_flag.output;
}

// The usual scheduler warnings before a preemption checkpoint and stop, through launch too.
TEST(Supervisor, PreemptionSignalsCheckpointAndStop) {
  // mpirun passes SIGUSR1 and SIGUSR2 on and the job ends with 0; a forwarded SIGHUP also stops
  // the job cleanly, and launch then exits as a process the signal killed would (129).
  for (const auto& [sig, code] :
       {std::pair<const char*, int>{"USR1", 0}, {"USR2", 0}, {"HUP", 129}}) {
    const std::string dir = fresh_dir(std::string("preempt_") + sig);
    const auto r = run_shell("timeout --preserve-status -s " + std::string(sig) + " 4 " +
                             std::string(TRILLION_BINARY) + " launch -n 2 -- " +
                             train(" --set train.steps=100000") + " --run-dir " + dir + " 2>&1");
    EXPECT_EQ(r.exit_code, code) << sig << ": " << r.output;
    const std::string events = slurp(dir + "/events.log");
    EXPECT_TRUE(has(events, "(signal)")) << sig << ": " << events;
    EXPECT_TRUE(has(events, "written")) << sig << ": " << events;
  }
}

// A stop the user or the scheduler asks for is not a failure: with restarts left, a supervised
// job still checkpoints, stops and exits as the signal's process would (128 + 15), with no restart.
TEST(Supervisor, ASignalStopsASupervisedJobWithoutARestart) {
  const std::string dir = fresh_dir("preempt_supervised_TERM");
  const auto r = run_shell("timeout --preserve-status -s TERM 4 " + std::string(TRILLION_BINARY) +
                           " launch -n 2 --max-restarts 3 -- " +
                           train(" --set train.steps=100000") + " --run-dir " + dir + " 2>&1");
  EXPECT_EQ(r.exit_code, 143) << r.output;
  EXPECT_FALSE(has(r.output, "supervisor: restart")) << r.output;
  const std::string events = slurp(dir + "/events.log");
  EXPECT_TRUE(has(events, "(signal)")) << events;
  EXPECT_TRUE(has(events, "written")) << events;
  EXPECT_FALSE(has(events, "supervisor: restart")) << events;
}

}  // namespace
}  // namespace trillion
