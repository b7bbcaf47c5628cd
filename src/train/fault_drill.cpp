// See fault_drill.h.
#include "train/fault_drill.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace trillion {

Heartbeat::Heartbeat(int rank) {
  if (const char* dir = std::getenv("TRILLION_HEARTBEAT_DIR"); dir != nullptr && *dir != '\0') {
    path_ = fmt::format("{}/rank_{}", dir, rank);
  }
}

void Heartbeat::beat(int64_t step) {
  if (path_.empty()) return;
  // Written in place (a rename per step would cost more than the beat is worth); the reader
  // takes the file's mtime and tolerates a torn number.
  if (FILE* f = std::fopen(path_.c_str(), "w")) {
    std::fprintf(f, "%lld %d\n", static_cast<long long>(step), static_cast<int>(::getpid()));
    std::fclose(f);
  }
}

FaultDrill::FaultDrill(std::string run_dir, int rank) : run_dir_(std::move(run_dir)), rank_(rank) {
  const char* spec = std::getenv("TRILLION_FAULTS");
  if (spec == nullptr) return;
  std::stringstream in(spec);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    Fault f;
    f.text = item;
    long long step = 0;
    int rank = 0;
    char kind[16] = {};
    char tail = 0;
    const int n = std::sscanf(item.c_str(), "%15[a-z]:%lld:%d%c", kind, &step, &rank, &tail);
    f.kind = kind;
    f.step = step;
    f.rank = rank;
    const bool ok =
        (n == 3 && (f.kind == "kill" || f.kind == "hang")) || (n == 2 && f.kind == "corrupt");
    if (!ok || step < (f.kind == "corrupt" ? 1 : 0) || rank < 0) {
      throw Error(
          fmt::format("TRILLION_FAULTS: '{}' is not kill:STEP:RANK, hang:STEP:RANK or "
                      "corrupt:STEP",
                      item));
    }
    faults_.push_back(f);
  }
}

void FaultDrill::check_ranks(int world_size) const {
  for (const Fault& f : faults_) {
    if (f.kind != "corrupt" && f.rank >= world_size) {
      throw Error(fmt::format("TRILLION_FAULTS: '{}' names rank {}, not one of the job's {} "
                              "ranks, so it would never fire",
                              f.text, f.rank, world_size));
    }
  }
}

void check_fault_injection(int world_size) {
  FaultDrill(std::string(), 0).check_ranks(world_size);  // parsing TRILLION_FAULTS checks its form
  struct Variable {
    const char* name;
    const char* form;
    int rank_at;  // which of the two numbers is a rank: 0, 1, or -1 (neither)
  };
  for (const Variable& v : {Variable{"TRILLION_FLIP_PARAMETER_BIT", "RANK:STEP", 0},
                            Variable{"TRILLION_DISK_FULL_AT_STEP", "STEP:RANK", 1},
                            Variable{"TRILLION_KILL_RANK_AT_STEP", "RANK:STEP", 0},
                            Variable{"TRILLION_METRICS_WRITE_FAILS", "LINE:COUNT", -1}}) {
    const char* spec = std::getenv(v.name);
    if (spec == nullptr) continue;
    long long a = -1, b = -1;
    char tail = 0;
    if (std::sscanf(spec, "%lld:%lld%c", &a, &b, &tail) != 2 || a < 0 || b < 0) {
      throw Error(fmt::format("{}='{}': expected {} (two non-negative integers, e.g. 1:5)",
                              v.name, spec, v.form));
    }
    const long long rank = v.rank_at == 0 ? a : b;
    if (v.rank_at >= 0 && rank >= world_size) {
      throw Error(fmt::format("{}='{}': rank {} is not one of the job's {} ranks, so it would "
                              "never fire",
                              v.name, spec, rank, world_size));
    }
  }
}

bool FaultDrill::fired(const Fault& f) const {
  std::ifstream in(run_dir_ + "/.faults_fired");
  for (std::string line; std::getline(in, line);) {
    if (line == f.text) return true;
  }
  return false;
}

void FaultDrill::record(const Fault& f) const {
  // Appended with O_APPEND and fsynced before the fault acts: a SIGKILL right after loses nothing.
  const int fd = ::open((run_dir_ + "/.faults_fired").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return;
  const std::string line = f.text + "\n";
  if (::write(fd, line.data(), line.size()) < 0) {
    // Nothing to do: the fault still fires, it may fire again after a restart.
  }
  ::fsync(fd);
  ::close(fd);
}

void FaultDrill::after_step(int64_t step) {
  for (const Fault& f : faults_) {
    if (f.kind == "corrupt" || f.step != step || f.rank != rank_ || fired(f)) continue;
    record(f);
    std::fflush(nullptr);
    std::raise(f.kind == "kill" ? SIGKILL : SIGSTOP);
  }
}

void FaultDrill::after_checkpoint(int64_t step, const std::string& checkpoint_dir) {
  for (const Fault& f : faults_) {
    if (f.kind != "corrupt" || f.step != step || fired(f)) continue;
    record(f);
    // The full form's parameters, or rank 0's shard of a sharded checkpoint.
    const bool full = std::filesystem::exists(checkpoint_dir + "/params.bin");
    std::fstream file(checkpoint_dir + (full ? "/params.bin" : "/params_r00000.bin"),
                      std::ios::in | std::ios::out | std::ios::binary);
    char byte = 0;
    file.seekg(0);
    file.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x10);
    file.seekp(0);
    file.write(&byte, 1);
  }
}

}  // namespace trillion
