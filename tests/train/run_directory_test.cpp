// One trainer per run directory (issue 15: two were accepted and mixed checkpoints and logs),
// a scheduler's preemption warning (SIGUSR1, SIGUSR2, SIGHUP) checkpoints and stops a one-process
// run, and a run directory whose checkpoints cannot be written is refused before anything. Issue
// 39 item 2: a metrics line that cannot be written is retried, then stops the run with a
// checkpoint and is carried by the error; a read-only metrics.jsonl is refused on resume.
#include "train/run_directory.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "cli_util.h"

namespace trillion {
namespace {

using testing::config_path;
using testing::fresh_dir;
using testing::has;
using testing::run_shell;
using testing::slurp;
namespace fs = std::filesystem;

TEST(RunDirectoryLock, ASecondTrainerOnTheSameDirectoryIsRefused) {
  const std::string dir = fresh_dir("run_dir_lock");
  const std::string train = std::string(TRILLION_BINARY) + " train " + config_path("tiny.toml") +
                            " --quiet --run-dir " + dir;
  // The first trainer runs; the second starts while it holds the directory; then SIGINT
  // checkpoints and stops the first.
  const auto r = run_shell(testing::signal_once_training(
      train + " --set train.steps=1000000", dir, "INT",
      train + " --resume 2>&1; echo second=$?;"));
  EXPECT_TRUE(has(r.output, "trillion train: error: run directory '" + dir +
                                "' is in use by another trainer (pid "))
      << r.output;
  EXPECT_TRUE(has(r.output, "second=2")) << r.output;
  std::ifstream in(dir + "/events.log");
  const std::string events((std::istreambuf_iterator<char>(in)), {});
  EXPECT_TRUE(has(events, "stopping after step")) << events;  // the first one, undisturbed
}

// `sig` to an endless one-process run once it trains: it finishes its step, checkpoints, stops,
// exits 0.
void expect_signal_checkpoints_and_stops(const std::string& sig) {
  const std::string dir = fresh_dir("preempt_" + sig);
  const auto r = run_shell(testing::signal_once_training(
      std::string(TRILLION_BINARY) + " train " + config_path("tiny.toml") +
          " --quiet --set train.steps=1000000 --run-dir " + dir + " 2>&1",
      dir, sig));
  EXPECT_EQ(r.exit_code, 0) << sig << ": " << r.output;
  std::ifstream in(dir + "/events.log");
  const std::string events((std::istreambuf_iterator<char>(in)), {});
  EXPECT_TRUE(has(events, "(signal)")) << sig << ": " << events;
  EXPECT_TRUE(has(events, "/checkpoints/step_")) << sig << ": " << events;
  EXPECT_FALSE(std::filesystem::is_empty(dir + "/checkpoints")) << sig;
  std::filesystem::remove_all(dir);
}

TEST(RunDirectoryLock, Sigusr1CheckpointsAndStopsAOneProcessRun) {
  expect_signal_checkpoints_and_stops("USR1");
}

// The other usual scheduler warnings before a preemption do the same.
TEST(RunDirectoryLock, Sigusr2AndSighupCheckpointAndStopAOneProcessRun) {
  expect_signal_checkpoints_and_stops("USR2");
  expect_signal_checkpoints_and_stops("HUP");
}

// Runs `trillion ARGS` as the unprivileged user nobody when this test runs as root (root ignores
// permission bits), else as this user.
testing::CommandResult trillion_unprivileged(const std::string& args) {
  const std::string as =
      ::geteuid() == 0 ? "setpriv --reuid=65534 --regid=65534 --clear-groups " : "";
  return run_shell(as + std::string(TRILLION_BINARY) + " " + args + " 2>&1");
}

// A checkpoints/ the trainer may not write (the run directory itself writable) is one line and
// exit 2 before anything is trained or changed, the checkpoint in it intact; made writable again,
// --resume goes on from it. The refusal also through `trillion launch -n 2` (every rank checks:
// each writes its own shard).
TEST(RunDirectoryLock, ACheckpointDirectoryWithoutWritePermissionIsOneLineAndLosesNothing) {
  namespace fs = std::filesystem;
  for (const std::string launch : {"", "launch -n 2 -- "}) {
    SCOPED_TRACE(launch);
    const std::string dir = fresh_dir(launch.empty() ? "no_write" : "no_write_sharded");
    const std::string train = launch + "train " + config_path("tiny.toml") +
                              " --quiet --set train.steps=8 --set checkpoint.interval=4" +
                              (launch.empty() ? "" : " --set parallel.dp=2") + " --run-dir " + dir;
    const auto first = trillion_unprivileged(train + " --stop-after 4");
    ASSERT_EQ(first.exit_code, 0) << first.output;
    const std::string ckpt = dir + "/checkpoints";
    const std::string metrics = slurp(dir + "/metrics.jsonl"), events = slurp(dir + "/events.log");
    const std::string manifest = slurp(ckpt + "/step_00000004/manifest.json");
    ASSERT_FALSE(manifest.empty());
    fs::permissions(ckpt, fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                    fs::perm_options::remove);
    const auto refused = trillion_unprivileged(train + " --resume");
    EXPECT_EQ(refused.exit_code, 2) << refused.output;
    EXPECT_TRUE(has(refused.output, "trillion train: error: cannot write checkpoints in '" + ckpt +
                                        "': Permission denied; make it writable for this user"))
        << refused.output;
    EXPECT_TRUE(has(refused.output, "(nothing was changed: its checkpoints are intact)"))
        << refused.output;
    if (launch.empty()) {
      EXPECT_EQ(std::count(refused.output.begin(), refused.output.end(), '\n'), 1)
          << refused.output;
    }
    EXPECT_EQ(slurp(dir + "/metrics.jsonl"), metrics);
    EXPECT_EQ(slurp(dir + "/events.log"), events);
    EXPECT_EQ(slurp(ckpt + "/step_00000004/manifest.json"), manifest);
    fs::permissions(ckpt, fs::perms::owner_write, fs::perm_options::add);
    if (!launch.empty()) {  // resuming is the one-process case's to show: the same code
      fs::remove_all(dir);
      continue;
    }
    const auto resumed = trillion_unprivileged(train + " --resume");
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_TRUE(
        has(slurp(dir + "/events.log"), "resumed from " + ckpt + "/step_00000004 at step 4"));
    EXPECT_TRUE(fs::exists(ckpt + "/step_00000008/manifest.json"));
    fs::remove_all(dir);
  }
}

// A resumed run's metrics.jsonl keeps exactly the lines of steps <= the checkpoint's, byte for
// byte: cut in place from the end (a torn last line, blank lines and the later steps go), across
// the 64 KiB read chunks, a complete last line whose newline was never written gets one, and a
// run that resumes from before every line keeps nothing.
TEST(RunDirectoryMetrics, AResumeKeepsExactlyTheLinesUpToItsCheckpoint) {
  const std::string dir = fresh_dir("truncate_metrics");
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/metrics.jsonl";
  std::string lines;           // 3000 lines of ~60 bytes: about 3 chunks
  std::vector<size_t> end_of;  // end_of[s] = bytes of the lines of steps 1..s
  end_of.push_back(0);
  for (int step = 1; step <= 3000; ++step) {
    lines += "{\"loss\":4.1,\"step\":" + std::to_string(step) +
             ",\"tokens\":128,\"pad\":\"xxxxxxxx\"}\n";
    end_of.push_back(lines.size());
  }
  auto write = [&](const std::string& text) { std::ofstream(path, std::ios::trunc) << text; };
  for (int64_t keep : {3000, 2999, 1500, 17, 1, 0}) {
    SCOPED_TRACE(keep);
    write(lines + "\n{\"loss\":4.0,\"step\":3001,\"tok");  // a blank line and a torn one
    truncate_metrics(path, keep);
    EXPECT_EQ(slurp(path), lines.substr(0, end_of[static_cast<size_t>(keep)]));
  }
  write(lines.substr(0, end_of[20] - 1));  // step 20's newline never written
  truncate_metrics(path, 25);
  EXPECT_EQ(slurp(path), lines.substr(0, end_of[20]));
  write(lines.substr(0, end_of[20] - 1));
  truncate_metrics(path, 19);
  EXPECT_EQ(slurp(path), lines.substr(0, end_of[19]));
  std::filesystem::remove(path);
  truncate_metrics(path, 5);  // no file: still none
  EXPECT_FALSE(std::filesystem::exists(path));
  std::filesystem::remove_all(dir);
}

// A resumed run removes the temporaries (NAME.tmp.PID) of atomic writes a killed trainer left in
// its run directory (the 10-minute chaos drill left three of metrics.jsonl, 85 MB), and nothing
// else; its metrics.jsonl is the first run's up to the checkpoint, then the resumed steps.
TEST(RunDirectoryMetrics, AResumedRunRemovesAKilledTrainersTemporaries) {
  namespace fs = std::filesystem;
  const std::string dir = fresh_dir("stale_temporaries");
  const std::string train = std::string(TRILLION_BINARY) + " train " + config_path("tiny.toml") +
                            " --quiet --set train.steps=8 --set checkpoint.interval=4 --run-dir " +
                            dir + " 2>&1";
  ASSERT_EQ(run_shell(train).exit_code, 0);
  fs::remove_all(dir + "/checkpoints/step_00000008");  // as if killed before writing it
  const std::string first = slurp(dir + "/metrics.jsonl");
  for (const char* name :
       {"summary.json.tmp.4242", "metrics.jsonl.tmp.17", "notes.tmp.txt", "a.tmp."})
    std::ofstream(dir + "/" + name) << "x";
  const auto r = run_shell(train + " --resume");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(dir + "/summary.json.tmp.4242"));
  EXPECT_FALSE(fs::exists(dir + "/metrics.jsonl.tmp.17"));
  EXPECT_TRUE(fs::exists(dir + "/notes.tmp.txt"));  // not a temporary's name: the user's
  EXPECT_TRUE(fs::exists(dir + "/a.tmp."));
  const std::string now = slurp(dir + "/metrics.jsonl");
  size_t four = 0;  // the bytes of steps 1..4
  for (int n = 0; n < 4; ++n) four = first.find('\n', four) + 1;
  EXPECT_EQ(now.substr(0, four), first.substr(0, four));
  EXPECT_EQ(std::count(now.begin(), now.end(), '\n'), 8);
  fs::remove_all(dir);
}

// The metrics steps of a run directory, in file order; every line must be whole JSON.
std::vector<int64_t> metric_steps(const std::string& dir) {
  std::vector<int64_t> steps;
  for (const auto& line : testing::read_metrics(dir)) steps.push_back(line["step"].get<int64_t>());
  return steps;
}

// A file system mounted for one test (tmpfs, or a read-only bind), unmounted when the test ends.
// Mounting needs root in a machine that allows it; where it cannot, the test is skipped.
struct Mount {
  std::string target;
  bool ok = false;
  Mount(const std::string& command, std::string at) : target(std::move(at)) {
    ok = run_shell(command + " 2>/dev/null").exit_code == 0;
  }
  ~Mount() {
    if (ok) run_shell("umount " + target + " 2>/dev/null");
  }
};

// Was: the failed write left a torn line, nothing on stderr, exit 0. A write that fails twice
// (TRILLION_METRICS_WRITE_FAILS: ENOSPC at the write call) and then succeeds loses no line.
TEST(RunDirectoryMetrics, AWriteThatFailsForAMomentLosesNoLine) {
  const std::string dir = fresh_dir("metrics_retry");
  const auto r = run_shell("TRILLION_METRICS_WRITE_FAILS=2:2 " + std::string(TRILLION_BINARY) +
                           " train " + config_path("markov.toml") + " --quiet --run-dir " + dir +
                           " --set train.steps=3 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(metric_steps(dir), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(has(slurp(dir + "/events.log"),
                  "metrics.jsonl: written after 2 failed attempt(s) (the file system was full or "
                  "failing for a moment); no line was lost"));
}

// A write that keeps failing stops the run after that step with a checkpoint (exit 2, the cause
// and the path on stderr), and the error carries the line the file could not take.
TEST(RunDirectoryMetrics, AWriteThatKeepsFailingStopsTheRunWithACheckpoint) {
  const std::string dir = fresh_dir("metrics_fail");
  const std::string train = std::string(TRILLION_BINARY) + " train " + config_path("markov.toml") +
                            " --quiet --run-dir " + dir + " --set train.steps=4";
  const auto r = run_shell("TRILLION_METRICS_WRITE_FAILS=2:1000 " + train + " 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "error: cannot append to '" + dir +
                                "/metrics.jsonl': No space left on device (the disk is full) "
                                "(retried for 3 s): the run stopped after step 2 (its checkpoint "
                                "is in " + dir + "/checkpoints)"))
      << r.output;
  EXPECT_TRUE(has(r.output, "the metrics lines not in metrics.jsonl, so that nothing is lost:\n{"))
      << r.output;
  EXPECT_TRUE(has(r.output, "\"step\":2,")) << r.output;
  EXPECT_EQ(metric_steps(dir), (std::vector<int64_t>{1}));
  EXPECT_TRUE(fs::exists(dir + "/checkpoints/step_00000002/manifest.json"));
  // Once the file takes lines again, --resume finishes the run from that checkpoint.
  const auto resumed = run_shell(train + " --resume 2>&1");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(metric_steps(dir), (std::vector<int64_t>{1, 3, 4}));
}

// A real full disk: a 1 MiB tmpfs with 16 KiB left. The run stops at the step whose line does not
// fit, every line in the file is whole, and the lost line and the failed checkpoint are said.
TEST(RunDirectoryMetrics, AFullDiskStopsTheRunAndSaysWhatItCouldNotWrite) {
  const std::string root = fresh_dir("metrics_tmpfs");
  fs::create_directories(root);
  Mount tmpfs("mount -t tmpfs -o size=1m tmpfs " + root, root);
  if (!tmpfs.ok) GTEST_SKIP() << "cannot mount a tmpfs here (needs root and a permissive machine)";
  ASSERT_EQ(run_shell("head -c $(( $(df -B1 --output=avail " + root + " | tail -1) - 16384 )) "
                      "/dev/zero > " + root + "/filler").exit_code, 0);
  const auto r = run_shell(std::string(TRILLION_BINARY) + " train " + config_path("markov.toml") +
                           " --quiet --run-dir " + root + "/run --set train.steps=100 "
                           "--set checkpoint.interval=1000 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "/metrics.jsonl': No space left on device")) << r.output;
  EXPECT_TRUE(has(r.output, "and its final checkpoint failed too")) << r.output;
  const std::vector<int64_t> steps = metric_steps(root + "/run");  // throws on a torn line
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps.back(), static_cast<int64_t>(steps.size()));
  EXPECT_TRUE(has(r.output, "\"step\":" + std::to_string(steps.size() + 1) + ",")) << r.output;
}

// Was: a read-only metrics.jsonl on resume dropped the new steps without a word. Now the resume
// is refused before anything changes.
TEST(RunDirectoryMetrics, AReadOnlyMetricsFileIsRefusedOnResume) {
  const std::string dir = fresh_dir("metrics_readonly");
  const std::string train = std::string(TRILLION_BINARY) + " train " + config_path("markov.toml") +
                            " --quiet --run-dir " + dir + " --set train.steps=";
  ASSERT_EQ(run_shell(train + "2 2>&1").exit_code, 0);
  const std::string metrics = dir + "/metrics.jsonl", before = slurp(metrics);
  Mount readonly("mount --bind " + metrics + " " + metrics + " && mount -o remount,ro,bind " +
                     metrics + " " + metrics,
                 metrics);
  if (!readonly.ok) GTEST_SKIP() << "cannot bind-mount read-only here (needs root)";
  const auto r = run_shell(train + "4 --resume 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "cannot append to '" + metrics + "': Read-only file system"))
      << r.output;
  EXPECT_EQ(slurp(metrics), before);
}

}  // namespace
}  // namespace trillion
