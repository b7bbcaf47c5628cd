// Runs the built `trillion` binary from tests (any folder) and captures its exit code and output.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace trillion::testing {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout, and stderr unless it was discarded
};

// Runs a shell command line (/bin/sh) and captures its stdout (and stderr if the line says so).
inline CommandResult run_shell(const std::string& cmd) {
  CommandResult r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// env: assignments put before the command ("NAME=VALUE ").
inline CommandResult run_trillion(const std::string& args, bool with_stderr = true,
                                  const std::string& env = "") {
  return run_shell(env + std::string(TRILLION_BINARY) + " " + args +
                   (with_stderr ? " 2>&1" : " 2>/dev/null"));
}

inline std::string config_path(const std::string& name) {
  return std::string(TRILLION_SOURCE_DIR) + "/configs/" + name;
}

// An empty directory for `name`, private to the running test: CTest runs tests of several
// binaries at once, and two tests that chose the same name would otherwise share (and lock, or
// delete) one directory.
inline std::string fresh_dir(const std::string& name) {
  std::string owner;
  if (const auto* test = ::testing::UnitTest::GetInstance()->current_test_info()) {
    owner = std::string(test->test_suite_name()) + "." + test->name() + "_";
    std::replace(owner.begin(), owner.end(), '/', '_');
  }
  const auto dir = std::filesystem::temp_directory_path() / ("trillion_test_" + owner + name);
  std::filesystem::remove_all(dir);
  return dir.string();
}

// The run directory of `trillion <args> --run-dir DIR`, run once and shared by every test (and
// test process) that asks for the same args with the same binary: parity tests compare many
// layouts against one one-process reference. A lock file serialises concurrent first requests;
// a directory without summary.json (a killed run) is run again.
inline std::string shared_run(const std::string& args) {
  const auto stamp = std::filesystem::last_write_time(TRILLION_BINARY).time_since_epoch().count();
  const size_t key = std::hash<std::string>{}(args + "|" + std::to_string(stamp));
  const auto dir =
      std::filesystem::temp_directory_path() / ("trillion_shared_" + std::to_string(key));
  const std::string lock_path = dir.string() + ".lock";
  const int fd = ::open(lock_path.c_str(), O_CREAT | O_RDWR, 0644);
  if (fd >= 0) ::flock(fd, LOCK_EX);
  if (!std::filesystem::exists(dir / "summary.json")) {
    std::filesystem::remove_all(dir);
    run_trillion(args + " --run-dir " + dir.string());
  }
  if (fd >= 0) {
    ::flock(fd, LOCK_UN);
    ::close(fd);
  }
  return dir.string();
}

inline bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A whole file (binary-safe); "" when it cannot be read.
inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// metrics.jsonl of a run directory, one JSON object per line.
inline std::vector<nlohmann::json> read_metrics(const std::string& dir) {
  std::ifstream in(dir + "/metrics.jsonl");
  std::vector<nlohmann::json> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// A shell line that starts `command` in the background, waits until it trains (its run
// directory's metrics.jsonl is not empty: the directory is its and a step is done), runs `between`
// (shell commands ending in ';', or nothing), sends it SIG`sig` and waits for it: the line exits
// with the command's status. No fixed sleeps, so as fast as the run starts under any load (the
// wait gives up after 60 s and the signal then finds a run still starting).
inline std::string signal_once_training(const std::string& command, const std::string& run_dir,
                                        const std::string& sig, const std::string& between = "") {
  return command + " & pid=$!; for i in $(seq 1200); do [ -s " + run_dir +
         "/metrics.jsonl ] && break; sleep 0.05; done; " + between + " kill -" + sig +
         " $pid; wait $pid";
}

// Multi-rank tests start more ranks than this machine has cores: one OpenMP thread per rank, set
// before the first command runs (as `const std::string kEnv = one_thread_per_rank();`; the empty
// string it returns is prefixed to command lines).
inline std::string one_thread_per_rank() {
  ::setenv("OMP_NUM_THREADS", "1", 1);
  return std::string();
}

}  // namespace trillion::testing
