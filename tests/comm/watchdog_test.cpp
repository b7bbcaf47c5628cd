// The supervisor's watchdog (cli/job_runner.h) on hand-made heartbeat files: which rank it names
// and when. A training rank is overdue after the heartbeat timeout; a rank still starting (no
// file, or step -1) only after the start-up timeout, and while it may still start, the ranks
// already waiting for it in their first collective are not a hang; a stopped process (state T)
// is named first.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "../train/cli_util.h"
#include "cli/job_runner.h"

namespace trillion {
namespace {

namespace fs = std::filesystem;

// rank_R = "STEP PID", last written `age` seconds ago.
void beat(const std::string& dir, int rank, long long step, int pid, double age) {
  const std::string path = dir + "/rank_" + std::to_string(rank);
  std::ofstream(path) << step << " " << pid << "\n";
  fs::last_write_time(path, fs::file_time_type::clock::now() -
                                std::chrono::duration_cast<fs::file_time_type::duration>(
                                    std::chrono::duration<double>(age)));
}

TEST(Watchdog, NamesTheRightRankInEveryPhase) {
  const std::string dir = testing::fresh_dir("watchdog");
  fs::create_directories(dir);
  cli::Watchdog w{dir, 10, 2, 100};
  cli::Watchdog::Beat b;
  const int me = static_cast<int>(::getpid());

  // Both training, fresh: nothing. Rank 1 silent for 12 s > 10: named, with its step.
  beat(dir, 0, 7, me, 1);
  beat(dir, 1, 6, me, 12);
  ASSERT_TRUE(w.hung(b, 500));
  EXPECT_EQ(b.rank, 1);
  EXPECT_EQ(b.step, 6);
  EXPECT_FALSE(b.starting);

  // Rank 1 has no beat yet, 50 s into the attempt (start-up timeout 100): rank 0, silent for
  // 30 s in its first collective, waits for it; no hang.
  fs::remove(dir + "/rank_1");
  beat(dir, 0, 0, me, 30);
  EXPECT_FALSE(w.hung(b, 50));
  // Past the start-up timeout: rank 1, the one that never started, not rank 0.
  ASSERT_TRUE(w.hung(b, 101));
  EXPECT_EQ(b.rank, 1);
  EXPECT_TRUE(b.starting);
  EXPECT_DOUBLE_EQ(b.age, 101);
  // Step -1 (started, not training yet) counts as starting too, by its own beat's age.
  beat(dir, 1, -1, me, 50);
  EXPECT_FALSE(w.hung(b, 500));
  beat(dir, 1, -1, me, 120);
  ASSERT_TRUE(w.hung(b, 500));
  EXPECT_EQ(b.rank, 1);
  EXPECT_TRUE(b.starting);

  // A stopped process is named after the heartbeat timeout even while starting, ahead of the
  // ranks waiting for it.
  const pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  ASSERT_GT(child, 0);
  ::kill(child, SIGSTOP);
  int status = 0;
  ::waitpid(child, &status, WUNTRACED);
  beat(dir, 1, -1, static_cast<int>(child), 11);
  beat(dir, 0, 0, me, 30);
  ASSERT_TRUE(w.hung(b, 20));
  EXPECT_EQ(b.rank, 1);
  EXPECT_TRUE(b.stopped);
  EXPECT_EQ(b.pid, child);
  ::kill(child, SIGKILL);
  ::waitpid(child, &status, 0);

  // No start-up timeout (0): a rank that never beats is never named, the others wait.
  cli::Watchdog no_startup{dir, 10, 2, 0};
  fs::remove(dir + "/rank_1");
  EXPECT_FALSE(no_startup.hung(b, 1e6));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace trillion
