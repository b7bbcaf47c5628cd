// See run_directory.h.
#include "train/run_directory.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "data/file_io.h"
#include "train/checkpoint/checkpoint.h"
#include "train/run_config.h"

namespace fs = std::filesystem;

namespace trillion {

namespace {
// Temporary files of atomic writes (name.tmp.PID) that a killed trainer left behind. Called with
// the directory's lock held, so no live writer owns one.
void remove_stale_temporaries(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const size_t at = name.rfind(".tmp.");
    if (at == std::string::npos || at + 5 == name.size() || !entry.is_regular_file(ec)) continue;
    if (name.find_first_not_of("0123456789", at + 5) != std::string::npos) continue;
    fs::remove(entry.path(), ec);
  }
}
// Throws when `path` exists but this process may not create files in it (EACCES, EROFS).
void check_writable(const std::string& path, const char* what) {
  std::error_code ec;
  if (!fs::is_directory(path, ec) || ::access(path.c_str(), W_OK | X_OK) == 0) return;
  const std::string problem = std::strerror(errno);
  throw Error(
      fmt::format("cannot {} '{}': {}; make it writable for this user (chmod u+w, or "
                  "run as its owner) and run again, or choose another --run-dir (nothing "
                  "was changed: its checkpoints are intact)",
                  what, path, problem));
}

// TRILLION_METRICS_WRITE_FAILS=LINE:COUNT (tests of a full disk): from the LINE-th metrics line
// this process appends (1-based; step LINE of a fresh run) on, COUNT attempts in all fail as
// ENOSPC would. Injected failures are retried without the wait, so the tests stay fast.
struct InjectedFailures {
  long long line = -1, count = 0;
};
InjectedFailures injected_metrics_failures() {
  InjectedFailures f;
  const char* spec = std::getenv("TRILLION_METRICS_WRITE_FAILS");
  char tail = 0;
  if (spec == nullptr || std::sscanf(spec, "%lld:%lld%c", &f.line, &f.count, &tail) != 2) return {};
  return f;
}

}  // namespace

AppendLog::~AppendLog() {
  if (fd_ >= 0) ::close(fd_);
}

void AppendLog::open(const std::string& path) {
  path_ = path;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int error = errno;
    throw Error(fmt::format("cannot append to '{}': {}{}; make it writable (or choose another "
                            "--run-dir) and run again (nothing was changed)",
                            path, std::strerror(error), data::write_error_hint(error)));
  }
}

std::string AppendLog::append(const std::string& line, int* retried) {
  const bool metrics = path_.ends_with("metrics.jsonl");
  const InjectedFailures inject = metrics ? injected_metrics_failures() : InjectedFailures{};
  const bool injected_line = metrics && ++lines_ >= inject.line && inject.line > 0;
  const std::string text = line + "\n";
  std::chrono::milliseconds wait(100);
  for (int attempt = 0;; ++attempt) {
    int error = 0;
    const off_t before = ::lseek(fd_, 0, SEEK_END);
    if (injected_line && injected_ < inject.count) {
      ++injected_;
      error = ENOSPC;
    } else {
      size_t done = 0;
      while (done < text.size()) {
        const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          error = n < 0 ? errno : ENOSPC;
          break;
        }
        done += static_cast<size_t>(n);
      }
    }
    if (error == 0) {
      failing_ = false;
      if (retried != nullptr) *retried = attempt;
      return "";
    }
    // A torn line would break every reader of the file: what was written is cut off again.
    if (before >= 0 && ::ftruncate(fd_, before) != 0) {
      // The cut failed too; the readers drop a torn last line, and the next append follows it.
    }
    // A file that already failed this way is tried once per line until a write succeeds again:
    // the run is stopping, and each of its last events must not wait 3 s more.
    if (attempt == 5 || failing_) {
      failing_ = true;
      return fmt::format("{}{}", std::strerror(error), data::write_error_hint(error));
    }
    std::this_thread::sleep_for(injected_line ? std::chrono::milliseconds(1) : wait);
    wait *= 2;
  }
}

// Steps only grow along the file (every start cuts before it appends), so the cut is found reading
// back from the end — the lines since the checkpoint, not the whole run, which a months-long job
// makes hundreds of MB (rewriting one of 640k steps took 8.2 s of a resume) — and made by one
// ftruncate: a trainer killed meanwhile leaves the old file or the cut one, never a copy.
void truncate_metrics(const std::string& path, int64_t last_step) {
  uint64_t cut = 0;  // the bytes kept
  bool kept_line_ends = true;
  const bool exists =
      data::visit_lines_backwards(path, [&](std::string_view line, uint64_t at, bool ends) {
        bool keep = false;
        if (!line.empty()) {
          try {
            keep = nlohmann::json::parse(line).value("step", int64_t{0}) <= last_step;
          } catch (const nlohmann::json::exception&) {
            // A torn last line from a killed run: dropped.
          }
        }
        if (!keep) return true;
        cut = at + line.size() + (ends ? 1 : 0);
        kept_line_ends = ends;
        return false;
      });
  if (!exists || (cut == fs::file_size(path) && kept_line_ends)) return;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  const auto fail = [&](const char* what) {
    const int error = errno;
    if (fd >= 0) ::close(fd);
    throw Error(fmt::format("cannot {} '{}': {}{}", what, path, std::strerror(error),
                            data::write_error_hint(error)));
  };
  if (fd < 0) fail("open");
  if (::ftruncate(fd, static_cast<off_t>(cut)) != 0) fail("truncate");
  // A whole last line whose newline was never written: the next line must not join it.
  if (!kept_line_ends && ::pwrite(fd, "\n", 1, static_cast<off_t>(cut)) != 1) fail("write");
  if (::fsync(fd) != 0) fail("sync");
  ::close(fd);
}

RunDirectory::RunDirectory(std::string dir, bool resume, bool lead, bool echo_events)
    : dir_(std::move(dir)), lead_(lead), echo_(echo_events && lead) {
  if (!resume && (fs::exists(metrics_path()) || !list_checkpoints(dir_).empty())) {
    throw Error(
        fmt::format("run directory '{}' already holds a run; pass --resume to continue it "
                    "or choose a new --run-dir (nothing was changed)",
                    dir_));
  }
  // A directory the trainer cannot write would fail the first checkpoint, after the training it
  // was to keep: said now, before anything is trained or changed. Every rank checks, since each
  // writes its own shard.
  std::error_code ec;
  if (fs::exists(dir_ + "/checkpoints", ec) && !fs::is_directory(dir_ + "/checkpoints", ec)) {
    throw Error(fmt::format("'{}/checkpoints' is a file, not a directory: the run could not "
                            "write a checkpoint; move it away or choose another --run-dir "
                            "(nothing was changed)",
                            dir_));
  }
  check_writable(dir_ + "/checkpoints", "write checkpoints in");
  if (!lead_) return;
  std::error_code made;
  fs::create_directories(dir_, made);
  if (made) {
    throw Error(
        fmt::format("cannot create run directory '{}': {}; choose a --run-dir you can "
                    "write",
                    dir_, made.message()));
  }
  check_writable(dir_, "write the run directory");
  // One trainer per run directory: two would mix checkpoints and logs. The lock dies with the
  // process, so a killed trainer never leaves the directory locked.
  const std::string lock_path = dir_ + "/.lock";
  lock_fd_ = ::open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) {
    throw Error(fmt::format("cannot open '{}': {}", lock_path, std::strerror(errno)));
  }
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    char buf[32] = {};
    const ssize_t n = ::pread(lock_fd_, buf, sizeof buf - 1, 0);
    ::close(lock_fd_);
    lock_fd_ = -1;
    std::string pid(buf, n > 0 ? static_cast<size_t>(n) : 0);
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    throw Error(
        fmt::format("run directory '{}' is in use by another trainer{}; wait for it to "
                    "finish or choose another --run-dir (nothing was changed)",
                    dir_, pid.empty() ? "" : " (pid " + pid + ")"));
  }
  const std::string me = std::to_string(::getpid()) + "\n";
  if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, me.data(), me.size(), 0) < 0) {
    // The pid is only for the message; the lock itself holds.
  }
  events_.open(dir_ + "/events.log");
}

RunDirectory::~RunDirectory() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void RunDirectory::start(const std::string& config_toml, int64_t first_step) {
  if (!lead_) return;
  remove_stale_temporaries(dir_);
  metrics_.open(metrics_path());  // a read-only file is refused before anything changes
  truncate_metrics(metrics_path(), first_step);
  truncate_tensorboard_events(dir_, first_step);  // also when a resumed run turned them off
  data::write_file_atomic(dir_ + "/config.toml", {config_toml});
  // The resolved config is the one place the run's settings reach the run directory, so the
  // switch is read from it here (the trainer needs no TensorBoard code).
  if (parse_run_config(config_toml, dir_ + "/config.toml", {}).train.tensorboard) {
    tensorboard_ = std::make_unique<TensorBoardWriter>(dir_);
  }
}

void RunDirectory::event(const std::string& line) {
  if (!lead_) return;
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  if (events_.is_open()) {
    const std::string cause = events_.append(fmt::format("{} {}", stamp, line));
    if (!cause.empty()) {
      // The event still reaches the console, and the run stops (write_failure()).
      if (!echo_) console(line + "\n");
      note_write_failure("events.log", cause);
    }
  }
  if (echo_) console(line + "\n");
}

void RunDirectory::note_write_failure(const std::string& file, const std::string& cause) {
  if (!write_failure_.empty()) return;
  write_failure_ = fmt::format("cannot append to '{}/{}': {} (retried for 3 s)", dir_, file, cause);
  console(fmt::format("trillion train: {}; the run stops with a checkpoint\n", write_failure_));
  if (file != "events.log") event(write_failure_);
}

void RunDirectory::console(const std::string& text) {
  if (!console_open_) return;
  if (std::fwrite(text.data(), 1, text.size(), stderr) == text.size()) return;
  const int error = errno;
  console_open_ = false;
  event(fmt::format("the console (stderr) closed ({}): training goes on; its progress is in "
                    "metrics.jsonl and events.log",
                    std::strerror(error)));
}

void RunDirectory::metrics(const std::string& json_line) {
  if (!lead_) return;
  unwritten_metrics_.push_back(json_line);
  int retried = 0;
  if (!flush_unwritten_metrics(&retried).empty()) {
    note_write_failure("metrics.jsonl", last_metrics_failure_);
  } else if (retried > 0) {
    event(fmt::format("metrics.jsonl: written after {} failed attempt(s) (the file system was "
                      "full or failing for a moment); no line was lost",
                      retried));
  }
  if (tensorboard_) tensorboard_->metrics(json_line);
}

std::vector<std::string> RunDirectory::flush_unwritten_metrics(int* retried) {
  while (!unwritten_metrics_.empty() && metrics_.is_open()) {
    int tries = 0;
    last_metrics_failure_ = metrics_.append(unwritten_metrics_.front(), &tries);
    if (retried != nullptr) *retried += tries;
    if (!last_metrics_failure_.empty()) break;
    unwritten_metrics_.erase(unwritten_metrics_.begin());
  }
  return unwritten_metrics_;
}

void RunDirectory::summary(const std::string& text) {
  if (lead_) data::write_file_atomic(dir_ + "/summary.json", {text});
}

}  // namespace trillion
