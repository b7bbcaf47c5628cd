// Runs the built `trillion` binary from tests (any folder) and captures its exit code and output.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

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

inline CommandResult run_trillion(const std::string& args, bool with_stderr = true) {
  return run_shell(std::string(TRILLION_BINARY) + " " + args +
                   (with_stderr ? " 2>&1" : " 2>/dev/null"));
}

inline std::string config_path(const std::string& name) {
  return std::string(TRILLION_SOURCE_DIR) + "/configs/" + name;
}

inline std::string fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("trillion_test_" + name);
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

// Multi-rank tests start more ranks than this machine has cores: one OpenMP thread per rank, set
// before the first command runs (as `const std::string kEnv = one_thread_per_rank();`; the empty
// string it returns is prefixed to command lines).
inline std::string one_thread_per_rank() {
  ::setenv("OMP_NUM_THREADS", "1", 1);
  return std::string();
}

}  // namespace trillion::testing
