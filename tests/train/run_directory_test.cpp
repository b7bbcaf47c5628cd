// One trainer per run directory (issue 15: two were accepted and mixed checkpoints and logs),
// and a scheduler's preemption warning (SIGUSR1) checkpoints and stops a one-process run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli_util.h"

namespace trillion {
namespace {

using testing::config_path;
using testing::fresh_dir;
using testing::run_shell;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(RunDirectoryLock, ASecondTrainerOnTheSameDirectoryIsRefused) {
  const std::string dir = fresh_dir("run_dir_lock");
  const std::string train = std::string(TRILLION_BINARY) + " train " + config_path("tiny.toml") +
                            " --quiet --run-dir " + dir;
  // The first trainer runs (SIGINT after 5 s checkpoints and stops it); the second starts while
  // it holds the directory.
  const auto r = run_shell("(timeout -s INT 5 " + train + " --set train.steps=1000000 &) ; " +
                           "sleep 2; " + train + " --resume 2>&1; echo second=$?; sleep 4");
  EXPECT_TRUE(has(r.output, "trillion train: error: run directory '" + dir +
                                "' is in use by another trainer (pid "))
      << r.output;
  EXPECT_TRUE(has(r.output, "second=2")) << r.output;
  std::ifstream in(dir + "/events.log");
  const std::string events((std::istreambuf_iterator<char>(in)), {});
  EXPECT_TRUE(has(events, "stopping after step")) << events;  // the first one, undisturbed
}

TEST(RunDirectoryLock, Sigusr1CheckpointsAndStopsAOneProcessRun) {
  const std::string dir = fresh_dir("preempt_usr1");
  const auto r = run_shell("timeout --preserve-status -s USR1 3 " + std::string(TRILLION_BINARY) +
                           " train " + config_path("tiny.toml") +
                           " --quiet --set train.steps=1000000 --run-dir " + dir + " 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(dir + "/events.log");
  const std::string events((std::istreambuf_iterator<char>(in)), {});
  EXPECT_TRUE(has(events, "(signal)")) << events;
  EXPECT_FALSE(std::filesystem::is_empty(dir + "/checkpoints"));
}

}  // namespace
}  // namespace trillion
