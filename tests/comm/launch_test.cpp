// `trillion launch`: ranks' output comes through (rank 0 plain, others prefixed), a failing rank
// is reported in exactly one line naming the rank and its cause (an exit code with the rank's
// own error line, or a signal), launch misconfigurations give one line with the fix, signals
// reach the ranks, and inside a job started by hand the subcommand simply runs. --program lets
// the tests use /bin/sh as the ranks' program so every failure is deterministic.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "../train/cli_util.h"

namespace trillion {
namespace {

using testing::run_trillion;

int lines(const std::string& s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

std::string sh_ranks(const std::string& n, const std::string& script) {
  return "launch -n " + n + " --program /bin/sh -- -c '" + script + "'";
}

TEST(Launch, RanksOutputArrivesTagged) {
  const auto r = run_trillion(sh_ranks("2", "echo out-$OMPI_COMM_WORLD_RANK"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("out-0\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank 1] out-1\n"), std::string::npos) << r.output;
  EXPECT_EQ(lines(r.output), 2) << r.output;
}

TEST(Launch, FailingRankIsOneLineWithItsError) {
  const auto r = run_trillion(
      sh_ranks("3",
               "if [ $OMPI_COMM_WORLD_RANK = 1 ]; then echo \"trillion train: error: boom\" >&2; "
               "exit 2; fi; sleep 1"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output, "trillion launch: rank 1 exited with code 2: trillion train: error: boom\n");
}

TEST(Launch, KilledRankNamesTheSignal) {
  const auto r =
      run_trillion(sh_ranks("3", "if [ $OMPI_COMM_WORLD_RANK = 2 ]; then kill -9 $$; fi; sleep 1"));
  EXPECT_EQ(r.exit_code, 128 + 9);
  EXPECT_EQ(lines(r.output), 1) << r.output;
  EXPECT_EQ(r.output.rfind("trillion launch: rank 2 was killed by signal 9 (Killed)", 0), 0u)
      << r.output;
}

// Issue 39 item 15: `launch -n 2 -- bogus` ended with a rank's "--help" hint as the cause. The
// subcommand is checked before any rank starts.
TEST(Launch, AnUnknownSubcommandIsNamedBeforeAnyRankStarts) {
  const auto r = run_trillion("launch -n 2 -- bogus");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output.rfind("trillion launch: error: 'bogus' is not a trillion command (the "
                           "commands: train, generate, ",
                           0),
            0u)
      << r.output;
  EXPECT_EQ(lines(r.output), 1) << r.output;
}

// Issue 39 item 15: a killed rank's peers leaked Open MPI's shared-memory complaint ("[vm:PID]
// Read -1, expected N, errno = 3") next to the one failure line. It is kept out of the output.
TEST(Launch, APeersSharedMemoryComplaintIsNotShown) {
  const auto r = run_trillion(
      sh_ranks("2",
               "if [ $OMPI_COMM_WORLD_RANK = 0 ]; then echo \"[vm:123] Read -1, expected 4096, "
               "errno = 3\" >&2; sleep 0.5; else kill -9 $$; fi; sleep 1"));
  EXPECT_EQ(r.exit_code, 128 + 9);
  EXPECT_EQ(r.output.find("Read -1"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.rfind("trillion launch: rank 1 was killed by signal 9 (Killed)", 0), 0u)
      << r.output;
}

TEST(Launch, SubcommandErrorOnEveryRankIsReportedOnce) {
  const std::string dir = testing::fresh_dir("launch_bad_heads");
  const auto r = run_trillion("launch -n 2 -- train " + testing::config_path("tiny.toml") +
                              " --run-dir " + dir + " --set model.n_heads=5");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lines(r.output), 1) << r.output;
  EXPECT_EQ(r.output.rfind("trillion launch: rank ", 0), 0u) << r.output;
  EXPECT_NE(r.output.find("trillion train: error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model.n_heads = 5"), std::string::npos) << r.output;
}

TEST(Launch, MisconfigurationsGiveOneLineWithTheFix) {
  struct Case {
    std::string args, expect;
  };
  const Case cases[] = {
      {"launch -n 0 -- train x", "-n 0 is not a process count"},
      {"launch -n 2 train x", "put the subcommand after '--'"},
      {"launch -n 2 --", "missing the subcommand"},
      {"launch -- train x", "missing -n N"},
      {"launch -n 2 --hostfile /nonexistent/hosts -- train x", "not a readable file"},
      {"launch -n 2 --mpirun /nonexistent/mpirun -- train x", "or pass --mpirun PATH"},
  };
  for (const Case& c : cases) {
    const auto r = run_trillion(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args;
    EXPECT_EQ(r.output.rfind("trillion launch: error: ", 0), 0u) << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.args << "\n" << r.output;
  }
}

TEST(Launch, TooFewSlotsInTheHostfile) {
  const std::string path = testing::fresh_dir("launch_hostfile");
  std::ofstream(path) << "localhost slots=1\n";
  const auto r = run_trillion("launch -n 2 --hostfile " + path + " --program /bin/true -- x");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.output,
            "trillion launch: not enough slots for the requested processes; lower -n, "
            "add hosts or slots to the hostfile\n");
}

std::string run_shell(const std::string& cmd) {
  std::string out;
  FILE* pipe = ::popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  ::pclose(pipe);
  return out;
}

TEST(Launch, ForwardsTerminationToTheRanks) {
  // A script starts launch in the background, sends it SIGTERM and prints launch's status.
  const std::string script_path = testing::fresh_dir("launch_term.sh");
  std::ofstream(script_path)
      << TRILLION_BINARY << " "
      << sh_ranks("2", "trap \"echo got-term-$OMPI_COMM_WORLD_RANK; exit 7\" TERM; sleep 30 & wait")
      << " & p=$!\nsleep 2\nkill -TERM $p\nwait $p\necho status=$?\n";
  const std::string out = run_shell("sh " + script_path);
  // mpirun delivers SIGTERM to every rank; the first rank to exit makes mpirun tear down the
  // others, so which ranks get to print is a race: at least one must have seen the signal.
  EXPECT_NE(out.find("got-term-"), std::string::npos) << out;
  EXPECT_NE(out.find("the job stopped after Terminated was forwarded"), std::string::npos) << out;
  EXPECT_NE(out.find("status=143"), std::string::npos) << out;  // 128 + SIGTERM
}

TEST(Launch, InsideAJobStartedByHandRunsTheSubcommand) {
  const std::string mpirun = "mpirun --allow-run-as-root --oversubscribe -n 2 ";
  const auto run = run_shell;
  const std::string ok =
      run(mpirun + TRILLION_BINARY +
          " launch -n 2 --program /bin/sh -- -c 'echo in-$OMPI_COMM_WORLD_RANK'");
  EXPECT_NE(ok.find("in-0"), std::string::npos) << ok;
  EXPECT_NE(ok.find("in-1"), std::string::npos) << ok;
  const std::string bad = run(mpirun + TRILLION_BINARY + " launch -n 3 --program /bin/true -- x");
  EXPECT_NE(bad.find("-n 3 but this job already has 2 processes (OMPI_COMM_WORLD_RANK)"),
            std::string::npos)
      << bad;
}

}  // namespace
}  // namespace trillion
