// See supervisor.h.
#include "cli/supervisor.h"

#include <fmt/format.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/job_runner.h"
#include "core/error.h"
#include "data/file_io.h"
#include "train/checkpoint/checkpoint.h"

namespace trillion::cli {

namespace {

std::string value_after(const std::vector<std::string>& args, const std::string& flag) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == flag) return args[i + 1];
    if (args[i].starts_with(flag + "=")) return args[i].substr(flag.size() + 1);
  }
  return "";
}

// The metrics lines of steps >= from_step of a run directory as (step, time, seconds), read back
// from the end only that far: steps grow along metrics.jsonl (a resumed trainer cuts the later
// ones before it appends), and reading all of a long run's file after each failure made every
// restart slower (1.4 s to 4.6 s over an 8-minute chaos drill of 430k steps).
struct StepTime {
  long long step;
  double time, seconds;
};
std::vector<StepTime> read_step_times(const std::string& run_dir, long long from_step) {
  std::vector<StepTime> out;
  data::visit_lines_backwards(
      run_dir + "/metrics.jsonl", [&](std::string_view line, uint64_t, bool) {
        try {
          const auto j = nlohmann::json::parse(line);
          const StepTime t{j.value("step", 0LL), j.value("time", 0.0), j.value("seconds", 0.0)};
          if (t.step < from_step) return false;
          out.push_back(t);
        } catch (const nlohmann::json::exception&) {
          // a torn last line of a killed run
        }
        return true;
      });
  std::reverse(out.begin(), out.end());
  return out;
}

long long newest_checkpoint_step(const std::string& run_dir) {
  long long best = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(run_dir + "/checkpoints", ec)) {
    // Only what retention and --resume take for a checkpoint (a user's step_00000010.bak is not).
    if (const auto step = checkpoint_step_of(e.path().filename().string())) {
      best = std::max<long long>(best, *step);
    }
  }
  return best;
}

void append_event(const std::string& run_dir, const std::string& line) {
  std::error_code ec;
  if (!std::filesystem::is_directory(run_dir, ec)) return;
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::ofstream(run_dir + "/events.log", std::ios::app) << stamp << " " << line << "\n";
}

// The step the trainer resumed from, from what events.log gained since byte `from` ("resumed from
// DIR at step N", or "no checkpoint to resume from"): the newest checkpoint that verified, which
// the directory listing cannot tell (a corrupt one is skipped). -1 when the attempt never said.
long long resumed_step_since(const std::string& run_dir, uintmax_t from) {
  std::ifstream in(run_dir + "/events.log");
  in.seekg(static_cast<std::streamoff>(from));
  long long step = -1;
  for (std::string line; std::getline(in, line);) {
    if (line.find(" no checkpoint to resume from") != std::string::npos) step = 0;
    const size_t at = line.find(" resumed from ");
    const size_t n = line.rfind(" at step ");
    if (at != std::string::npos && n != std::string::npos && n > at) {
      step = std::atoll(line.c_str() + n + 9);
    }
  }
  return step;
}

uintmax_t file_bytes(const std::string& path) {
  std::error_code ec;
  const uintmax_t n = std::filesystem::file_size(path, ec);
  return ec ? 0 : n;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Adds the supervisor's accounting to the run's summary.json (written by rank 0 of the last
// attempt, or created here when no attempt got that far): restarts, each failure, the time lost,
// the job's wall time, goodput, and whether the job finished. Returns the goodput.
double write_job_summary(const std::string& run_dir, const nlohmann::json& failures, double lost,
                         double wall, bool finished) {
  const std::string path = run_dir + "/summary.json";
  nlohmann::json summary = nlohmann::json::object();
  {
    std::ifstream in(path);
    try {
      if (in) summary = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception&) {
    }
  }
  if (!summary.is_object()) summary = nlohmann::json::object();
  // A failed job's last failure was not restarted: restarts counts only the ones that were.
  summary["restarts"] = finished ? failures.size() : failures.size() - 1;
  summary["failures"] = failures;
  summary["lost_seconds"] = lost;
  summary["job_seconds"] = wall;
  summary["goodput"] = wall > 0 ? std::max(0.0, 1.0 - lost / wall) : 1.0;
  summary["job_finished"] = finished;
  std::error_code ec;
  if (std::filesystem::is_directory(run_dir, ec)) {
    data::write_file_atomic(path, {summary.dump(2) + "\n"});
  }
  return summary["goodput"].get<double>();
}

}  // namespace

int supervise(const SupervisorOptions& args, const std::vector<std::string>& base, bool verbose) {
  const bool supervised =
      args.max_restarts > 0 || args.heartbeat_timeout > 0 || !args.faults.empty();
  const std::string run_dir = value_after(args.command, "--run-dir");
  if (supervised && (args.command[0] != "train" || run_dir.empty())) {
    throw Error(
        "--max-restarts, --heartbeat-timeout and the fault drills supervise "
        "`train ... --run-dir DIR` (the run directory holds the checkpoints a restart "
        "resumes from)");
  }
  if (!args.faults.empty()) {
    std::string spec;
    for (const std::string& f : args.faults) spec += (spec.empty() ? "" : ",") + f;
    ::setenv("TRILLION_FAULTS", spec.c_str(), 1);
  }
  Watchdog watchdog{run_dir + "/.heartbeat", args.heartbeat_timeout, args.processes,
                    args.startup_timeout > 0
                        ? args.startup_timeout
                        : std::max(kDefaultStartupTimeout, args.heartbeat_timeout)};
  // A train job with a run directory and no heartbeat timeout gets the default watchdog, which
  // names only a rank stopped by a signal (job_runner.h).
  const bool default_watchdog = args.heartbeat_timeout == 0 && args.stopped_timeout > 0 &&
                                args.command[0] == "train" && !run_dir.empty();
  if (default_watchdog) {
    watchdog.timeout = args.stopped_timeout;
    watchdog.stopped_only = true;
  }
  const double started = unix_now();
  nlohmann::json failures = nlohmann::json::array();
  double lost = 0;
  double failed_at = 0;
  // When this attempt's own work began (its first new step, else its launch): a failure loses
  // only work done since then, or the restart and the earlier attempts' losses count twice.
  double attempt_began = started;
  long long resumed_from = -1;
  double failed_floor = started;  // of the last failure, to recount it (see below)
  for (int attempt = 0;; ++attempt) {
    std::vector<std::string> cmd = base;
    const bool has_resume =
        std::find(args.command.begin(), args.command.end(), "--resume") != args.command.end();
    if (attempt > 0 && !has_resume) cmd.push_back("--resume");
    // A restart may come before the first checkpoint: its --resume then starts over (resume.h),
    // where a user's own --resume of a run without a checkpoint is refused.
    if (attempt > 0) {
      ::setenv("TRILLION_SUPERVISED_RESTART", "1", 1);
    } else {
      ::unsetenv("TRILLION_SUPERVISED_RESTART");
    }
    if (supervised || default_watchdog) {
      std::error_code ec;
      std::filesystem::remove_all(watchdog.dir, ec);
      std::filesystem::create_directories(watchdog.dir, ec);
      ::setenv("TRILLION_HEARTBEAT_DIR", watchdog.dir.c_str(), 1);
    }
    attempt_began = unix_now();
    const uintmax_t events_before = file_bytes(run_dir + "/events.log");
    const JobOutcome out = run_job(
        cmd, verbose, args.heartbeat_timeout > 0 || default_watchdog ? &watchdog : nullptr);
    const double ended = unix_now();
    const long long resumed = attempt > 0 ? resumed_step_since(run_dir, events_before) : -1;
    if (resumed >= 0 && resumed != resumed_from) {
      // The newest checkpoint was corrupt: the work back to the one the restart used is lost.
      double since = started;  // steps <= resumed are the failed attempt's lines, kept
      for (const StepTime& t : read_step_times(run_dir, resumed)) {
        if (t.step == resumed && t.time > 0) since = t.time;
      }
      const double work = std::max(0.0, failed_at - std::max(since, failed_floor));
      lost += work - failures.back()["lost_seconds"].get<double>();
      failures.back()["lost_seconds"] = work;
      failures.back()["resumed_from"] = resumed;
      append_event(run_dir, fmt::format("supervisor: restart {} resumed from step {}, not {} (the "
                                        "newer checkpoints did not verify); {:.1f} s lost to it",
                                        attempt, resumed, resumed_from, work));
      resumed_from = resumed;
    }
    if (attempt > 0 && resumed_from >= 0) {  // the restart's cost: until the first new step began
      for (const StepTime& t : read_step_times(run_dir, resumed_from + 1)) {
        if (t.step == resumed_from + 1 && t.time > 0) {
          const double restart = std::max(0.0, t.time - t.seconds - failed_at);
          attempt_began = t.time - t.seconds;
          lost += restart;
          failures.back()["restart_seconds"] = restart;
          failures.back()["lost_seconds"] = failures.back()["lost_seconds"].get<double>() + restart;
          break;
        }
      }
    }
    if (out.code == 0) break;
    const bool retry = out.restartable && attempt < args.max_restarts;
    if (!supervised || (!retry && !out.restartable)) {
      std::fprintf(stderr, "%s\n", out.failure.c_str());
      return out.on_request ? 128 + forwarded_signal() : out.code;
    }
    // The work since the newest checkpoint is lost (with no restart left: all of it, for good).
    failed_at = ended;
    resumed_from = newest_checkpoint_step(run_dir);
    const auto steps = read_step_times(run_dir, resumed_from);
    const long long last_step = steps.empty() ? resumed_from : steps.back().step;
    double since = started;
    for (const StepTime& t : steps) {
      if (t.step == resumed_from && t.time > 0) since = t.time;
    }
    const double work = std::max(0.0, failed_at - std::max(since, attempt_began));
    lost += work;
    failed_floor = attempt_began;
    failures.push_back({{"attempt", attempt + 1},
                        {"rank", out.failed_rank},
                        {"last_step", last_step},
                        {"resumed_from", resumed_from},
                        {"cause", out.failure},
                        {"lost_seconds", work}});
    if (out.detected_seconds >= 0) failures.back()["detected_seconds"] = out.detected_seconds;
    if (!retry) {
      // No restart left: the job failed, but its accounting still goes to summary.json (the
      // failures, the time lost, and that it did not finish) before launch exits.
      failures.back().erase("resumed_from");
      std::fprintf(stderr, "%s\n", out.failure.c_str());
      append_event(run_dir, fmt::format("supervisor: {}; no restart left (--max-restarts {})",
                                        out.failure, args.max_restarts));
      write_job_summary(run_dir, failures, lost, unix_now() - started, false);
      return out.on_request ? 128 + forwarded_signal() : out.code;
    }
    const std::string line = fmt::format(
        "supervisor: restart {} of {} after: {} (last step logged {}, newest checkpoint "
        "step {}; {:.1f} s since it: the work to redo and the failure's detection)",
        attempt + 1, args.max_restarts, out.failure, last_step, resumed_from, work);
    std::fprintf(stderr, "%s\n", line.c_str());
    append_event(run_dir, line);
  }
  if (supervised) {
    const double wall = unix_now() - started;
    const double goodput = write_job_summary(run_dir, failures, lost, wall, true);
    if (!failures.empty()) {
      append_event(run_dir, fmt::format("supervisor: finished after {} restart(s): {:.1f} s lost "
                                        "of {:.1f} s, goodput {:.3f}",
                                        failures.size(), lost, wall, goodput));
    }
  }
  // A job stopped by SIGTERM, SIGINT or SIGHUP ends 0 after its checkpoint (it got SIGUSR2), but
  // launch exits as a process that signal killed would, so schedulers and shells see the stop.
  const int sig = forwarded_signal();
  return sig != 0 && sig != SIGUSR1 && sig != SIGUSR2 ? 128 + sig : 0;
}

}  // namespace trillion::cli
