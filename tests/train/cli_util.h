// Runs the built `trillion` binary from tests (any folder) and captures its exit code and output.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

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

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

}  // namespace trillion::testing
