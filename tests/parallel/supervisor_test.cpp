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

std::string train(const std::string& extra = "", const std::string& config = "tiny.toml") {
  return "train " + testing::config_path(config) +
         " --quiet --set parallel.dp=2 --set train.steps=20 --set train.checkpoint_every=4" + extra;
}

void expect_bitwise(const std::string& a, const std::string& b) {
  const auto cmp = run_trillion("compare " + a + " " + b + " --tol 0");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
  EXPECT_TRUE(has(cmp.output, "(bitwise equal)")) << cmp.output;
}

// The kill drill: rank 1 killed after step 5 and rank 0 after step 12 of the 20-step run; the job
// must end 0 and bitwise the clean run at the same layout. Returns its summary.json.
nlohmann::json kill_drill(const std::string& extra, const std::string& dir,
                          const std::string& config = "tiny.toml") {
  const std::string clean = shared_run(kEnv + "launch -n 2 -- " + train(extra, config));
  const auto r = run_trillion("launch -n 2 --max-restarts 3 --fail-at 5:1 --fail-at 12:0 -- " +
                              train(extra, config) + " --run-dir " + dir);
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

// The drill at the other axes that shard the state: context parallelism (each rank half of every
// sequence, ring attention) and the MoE model with its experts split over the ranks (dp 2 x ep 2
// would need 4; ep 2 within dp 2 puts 4 of the 8 routed experts on each rank, ZeRO-1 over dp).
TEST(Supervisor, KilledRanksOfCpAndExpertParallelJobsRestartAndTheRunIsBitwiseTheCleanOne) {
  struct Case {
    std::string name, extra, config;
  };
  for (const Case& c :
       {Case{"cp", " --set parallel.dp=1 --set parallel.cp=2", "tiny.toml"},
        Case{"ep", " --set parallel.ep=2 --set parallel.zero=1", "moe-tiny.toml"}}) {
    const std::string dir = fresh_dir("supervisor_kill_" + c.name);
    const auto s = kill_drill(c.extra, dir, c.config);
    EXPECT_EQ(s["restarts"], 2) << c.name;
    EXPECT_EQ(s["failures"][0]["rank"], 1) << c.name;
    EXPECT_EQ(s["failures"][0]["resumed_from"], 4) << c.name;
    EXPECT_EQ(s["failures"][1]["rank"], 0) << c.name;
    EXPECT_EQ(s["failures"][1]["resumed_from"], 12) << c.name;
    const auto layout_json = read_json(dir + "/checkpoints/step_00000020/layout.json");
    EXPECT_EQ(layout_json["writer"][c.name], 2) << c.name;
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

// Issue 39 item 10: without --heartbeat-timeout a stopped rank left rank 0 spinning in MPI at
// 100% CPU forever. launch's default watchdog names a rank stopped by a signal (here after
// --stopped-timeout 3 instead of the default 300 s) and stops the job.
TEST(Supervisor, WithoutAHeartbeatTimeoutAStoppedRankIsNamedByTheDefaultWatchdog) {
  const std::string dir = fresh_dir("supervisor_default_watchdog");
  const auto r = testing::run_shell("timeout 120 " + std::string(TRILLION_BINARY) +
                                    " launch -n 2 --hang-at 3:1 --stopped-timeout 3 -- " +
                                    train() + " --run-dir " + dir + " 2>&1");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "the job spun until timeout(1) killed it:\n" << r.output;
  EXPECT_TRUE(has(r.output, "trillion launch: rank 1 made no progress for ")) << r.output;
  EXPECT_TRUE(has(r.output, "s after step 3 (pid ")) << r.output;
  EXPECT_TRUE(has(r.output, "is stopped) (stopped-rank timeout 3 s, launch's default watchdog; "
                            "--stopped-timeout changes it); the job was stopped"))
      << r.output;
}

// A rank that stops during start-up (after MPI, the data, the model and the checkpoint load,
// before its first step) is named by the start-up timeout, not blamed on the ranks waiting for
// it in their first collective, and the job restarts. A finished job says so in summary.json.
TEST(Supervisor, ARankStoppedDuringStartUpIsNamedAndTheJobRestarts) {
  const std::string clean = shared_run(kEnv + "launch -n 2 -- " + train());
  const std::string dir = fresh_dir("supervisor_hang_start");
  const auto r = run_trillion(
      "launch -n 2 --max-restarts 1 --heartbeat-timeout 3 --startup-timeout 60 --hang-at 0:1 "
      "-- " +
      train() + " --run-dir " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_bitwise(clean, dir);
  const std::string events = slurp(dir + "/events.log");
  // Stopped: named after the heartbeat timeout, not the start-up one (it cannot progress).
  EXPECT_TRUE(has(events, "trillion launch: rank 1 did not reach its first step: stopped (pid "))
      << events;
  EXPECT_TRUE(has(events, "(heartbeat timeout 3 s); the job was stopped")) << events;
  const auto s = read_json(dir + "/summary.json");
  EXPECT_TRUE(s["job_finished"].get<bool>()) << s;
  ASSERT_EQ(s["restarts"], 1) << s;
  EXPECT_EQ(s["failures"][0]["rank"], 1) << s;
  EXPECT_EQ(s["failures"][0]["resumed_from"], 0) << s;
  const double detected = s["failures"][0]["detected_seconds"].get<double>();
  EXPECT_GT(detected, 3.0);
  EXPECT_LE(detected, 3.0 + 10.0);
  // --startup-timeout is the watchdog's: alone it is refused.
  const auto alone = run_trillion("launch -n 2 --startup-timeout 60 -- " + train());
  EXPECT_EQ(alone.exit_code, 2) << alone.output;
  EXPECT_TRUE(has(alone.output, "--startup-timeout 60 needs the watchdog")) << alone.output;
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
  // The failed job still accounts for itself: one restart, both failures, the work lost and that
  // it did not finish (the second failure's work since step 4's checkpoint is lost for good).
  const auto s = read_json(dir + "/summary.json");
  EXPECT_FALSE(s["job_finished"].get<bool>()) << s;
  EXPECT_EQ(s["restarts"], 1) << s;
  ASSERT_EQ(s["failures"].size(), 2u) << s;
  EXPECT_EQ(s["failures"][0]["last_step"], 3) << s;
  EXPECT_EQ(s["failures"][1]["last_step"], 6) << s;
  EXPECT_EQ(s["failures"][1]["rank"], 1) << s;
  EXPECT_GT(s["failures"][1]["lost_seconds"].get<double>(), 0) << s;
  EXPECT_NEAR(s["lost_seconds"].get<double>(),
              s["failures"][0]["lost_seconds"].get<double>() +
                  s["failures"][1]["lost_seconds"].get<double>(),
              1e-6);
  EXPECT_LT(s["goodput"].get<double>(), 1) << s;
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

// Two trainers on one run directory, the second a launched job: every rank of it is refused
// (the lock is the run directory's, whichever rank asks), launch prints the one line and exits 2,
// and the first trainer goes on undisturbed.
TEST(RunDirectoryLock, ALaunchedJobOnADirectoryInUseIsRefusedInOneLine) {
  const std::string dir = fresh_dir("run_dir_lock_launch");
  const std::string first = std::string(TRILLION_BINARY) + " train " +
                            testing::config_path("tiny.toml") + " --quiet --run-dir " + dir +
                            " --set train.steps=1000000";
  const auto r = run_shell(testing::signal_once_training(
      first, dir, "INT",
      kEnv + std::string(TRILLION_BINARY) + " launch -n 2 -- " + train() + " --resume --run-dir " +
          dir + " 2>&1; echo second=$?;"));
  EXPECT_TRUE(
      has(r.output, "error: run directory '" + dir + "' is in use by another trainer (pid "))
      << r.output;
  EXPECT_TRUE(has(r.output, "second=2")) << r.output;
  const std::string events = slurp(dir + "/events.log");
  EXPECT_TRUE(has(events, "stopping after step")) << events;  // the first one, undisturbed
}

// The usual scheduler warnings before a preemption checkpoint and stop, through launch too.
TEST(Supervisor, PreemptionSignalsCheckpointAndStop) {
  // mpirun passes SIGUSR1 and SIGUSR2 on and the job ends with 0; a forwarded SIGHUP also stops
  // the job cleanly, and launch then exits as a process the signal killed would (129).
  for (const auto& [sig, code] :
       {std::pair<const char*, int>{"USR1", 0}, {"USR2", 0}, {"HUP", 129}}) {
    const std::string dir = fresh_dir(std::string("preempt_") + sig);
    const auto r = run_shell(testing::signal_once_training(
        std::string(TRILLION_BINARY) + " launch -n 2 -- " + train(" --set train.steps=100000") +
            " --run-dir " + dir + " 2>&1",
        dir, sig));
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
  const auto r = run_shell(testing::signal_once_training(
      std::string(TRILLION_BINARY) + " launch -n 2 --max-restarts 3 -- " +
          train(" --set train.steps=100000") + " --run-dir " + dir + " 2>&1",
      dir, "TERM"));
  EXPECT_EQ(r.exit_code, 143) << r.output;
  EXPECT_FALSE(has(r.output, "supervisor: restart")) << r.output;
  const std::string events = slurp(dir + "/events.log");
  EXPECT_TRUE(has(events, "(signal)")) << events;
  EXPECT_TRUE(has(events, "written")) << events;
  EXPECT_FALSE(has(events, "supervisor: restart")) << events;
}

}  // namespace
}  // namespace trillion
