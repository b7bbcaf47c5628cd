// See supervisor.h.
#include "cli/supervisor.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/job_runner.h"
#include "comm/hosts.h"
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

// Whether `host` answers a TCP connection (a refusal is an answer) within `timeout_ms`: a
// host whose link is cut does not, while its processes live on and the job just hangs.
bool host_answers(const comm::HostfileEntry& host, int timeout_ms) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string name = host.address.empty() ? host.host : host.address;
  if (::getaddrinfo(name.c_str(), "9", &hints, &found) != 0 || found == nullptr) return true;
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
  bool answered = true;
  if (fd >= 0) {
    if (::connect(fd, found->ai_addr, found->ai_addrlen) != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      answered = ::poll(&p, 1, timeout_ms) > 0;
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return answered;
}

// After a hang: the first host of the hostfile that does not answer (empty: all do).
std::string silent_host(const std::string& hostfile) {
  try {
    for (const comm::HostfileEntry& e : comm::read_hostfile(hostfile)) {
      if (!host_answers(e, 1000)) return e.host;
    }
  } catch (const Error&) {
  }
  return "";
}

// The host of a failure and that host's ranks under `hostfile` (empty name: unknown).
struct FailedHost {
  std::string name;
  std::vector<int> ranks;
  bool silent = false;  // found by probing after a hang: it does not answer
};
FailedHost failed_host(const JobOutcome& out, const std::string& hostfile, int processes) {
  FailedHost f;
  if (hostfile.empty()) return f;
  comm::JobHosts hosts;
  try {
    hosts = comm::map_ranks_by_slot(comm::read_hostfile(hostfile), processes, hostfile);
  } catch (const Error&) {
    return f;  // mpirun took it; its report stands without the host
  }
  if (!out.failed_host.empty()) {
    f.name = out.failed_host;
  } else if (out.detected_seconds >= 0 && !(f.name = silent_host(hostfile)).empty()) {
    f.silent = true;  // its link, not the rank the watchdog saw first, is what failed
  } else if (out.failed_rank >= 0 && out.failed_rank < processes) {
    f.name = hosts.names[hosts.host_of_rank[out.failed_rank]];
  }
  for (int r = 0; r < processes; ++r) {
    if (!f.name.empty() && hosts.names[hosts.host_of_rank[r]] == f.name) f.ranks.push_back(r);
  }
  return f;
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

// `hostfile` without host `lost`, written as DIR/.elastic/hostfile_N (with a copy of the .mca
// settings beside it); `slots` gets the slots left.
std::string hostfile_without(const std::string& hostfile, const std::string& lost,
                             const std::string& dir, int attempt, int& slots) {
  const std::string out_dir = dir + "/.elastic";
  std::filesystem::create_directories(out_dir);
  const std::string path = fmt::format("{}/hostfile_{}", out_dir, attempt);
  std::string text;
  slots = 0;
  for (const comm::HostfileEntry& e : comm::read_hostfile(hostfile)) {
    if (e.host == lost) continue;
    text += fmt::format("{} slots={} # site={}\n", e.host, e.slots, e.site);
    slots += e.slots;
  }
  data::write_file_atomic(path, {text});
  std::error_code ec;
  std::filesystem::copy_file(hostfile + ".mca", path + ".mca",
                             std::filesystem::copy_options::overwrite_existing, ec);
  return path;
}

nlohmann::json layout_json(const ElasticOptions& e, int processes, const std::string& hostfile) {
  int hosts = 0;
  try {
    hosts = static_cast<int>(comm::read_hostfile(hostfile).size());
  } catch (const Error&) {
  }
  return {{"dp", e.dp},
          {"processes", processes},
          {"hosts", hosts},
          {"micro_batch", e.micro_batch},
          {"grad_accum", e.grad_accum}};
}

}  // namespace

int elastic_replicas(const ElasticOptions& e, int slots, int64_t& micro_batch,
                     int64_t& grad_accum) {
  const int64_t global = e.micro_batch * e.grad_accum, per_rank = e.micro_batch / e.dp;
  for (int d = std::min(e.dp, slots / e.replica_ranks); d >= 1; --d) {
    if (global % (d * per_rank) == 0) {
      micro_batch = d * per_rank;
      grad_accum = global / micro_batch;
      return d;
    }
  }
  return 0;
}

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
  // What the next attempt runs: after an elastic shrink, fewer hosts and replicas.
  std::vector<std::string> current = base, layout_sets;
  std::string hostfile = args.hostfile;
  int processes = args.processes;
  ElasticOptions layout = args.elastic;
  for (int attempt = 0;; ++attempt) {
    std::vector<std::string> cmd = current;
    cmd.insert(cmd.end(), layout_sets.begin(), layout_sets.end());
    watchdog.processes = processes;
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
    const FailedHost lost_host = failed_host(out, hostfile, processes);
    std::string failure_text = out.failure;
    if (!lost_host.name.empty() && out.restartable) {
      failure_text += fmt::format(" [host {}{}: rank(s) {}]", lost_host.name,
                                  lost_host.silent ? " does not answer" : "",
                                  ranks_text(lost_host.ranks));
    }
    const bool retry = out.restartable && attempt < args.max_restarts;
    if (!supervised || (!retry && !out.restartable)) {
      std::fprintf(stderr, "%s\n", failure_text.c_str());
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
                        {"cause", failure_text},
                        {"lost_seconds", work}});
    if (out.detected_seconds >= 0) failures.back()["detected_seconds"] = out.detected_seconds;
    if (!lost_host.name.empty()) {
      failures.back()["host"] = lost_host.name;
      failures.back()["host_ranks"] = lost_host.ranks;
    }
    std::string shrink;
    if (retry && layout.enabled && !lost_host.name.empty()) {
      int slots = 0;
      const std::string smaller =
          hostfile_without(hostfile, lost_host.name, run_dir, attempt + 1, slots);
      ElasticOptions next = layout;
      next.dp = elastic_replicas(layout, slots, next.micro_batch, next.grad_accum);
      if (next.dp == 0) {
        failures.back().erase("resumed_from");
        const std::string line = fmt::format(
            "{}; --elastic: the {} slot(s) left hold no replica of {} rank(s)", failure_text,
            slots, layout.replica_ranks);
        std::fprintf(stderr, "%s\n", line.c_str());
        append_event(run_dir, "supervisor: " + line);
        write_job_summary(run_dir, failures, lost, unix_now() - started, false);
        return out.code;
      }
      failures.back()["layout_before"] = layout_json(layout, processes, hostfile);
      processes = next.dp * layout.replica_ranks;
      hostfile = smaller;
      failures.back()["layout_after"] = layout_json(next, processes, hostfile);
      shrink = fmt::format(
          "; --elastic: restarting without host {} at dp {} (was {}), train.micro_batch {} and "
          "train.grad_accum {} (global batch {} kept), {} process(es)",
          lost_host.name, next.dp, layout.dp, next.micro_batch, next.grad_accum,
          next.micro_batch * next.grad_accum, processes);
      layout = next;
      current = layout.command(hostfile, processes);
      // Drills that name a rank the smaller job does not have are done (the train command
      // refuses them).
      std::string spec;
      for (const std::string& f : args.faults) {
        const size_t last = f.rfind(':');
        if (!f.starts_with("corrupt:") && std::stoi(f.substr(last + 1)) >= processes) continue;
        spec += (spec.empty() ? "" : ",") + f;
      }
      ::setenv("TRILLION_FAULTS", spec.c_str(), 1);
      layout_sets = {"--set", fmt::format("parallel.dp={}", layout.dp), "--set",
                     fmt::format("train.micro_batch={}", layout.micro_batch), "--set",
                     fmt::format("train.grad_accum={}", layout.grad_accum)};
    }
    if (!retry) {
      // No restart left: the job failed, but its accounting still goes to summary.json (the
      // failures, the time lost, and that it did not finish) before launch exits.
      failures.back().erase("resumed_from");
      std::fprintf(stderr, "%s\n", failure_text.c_str());
      append_event(run_dir, fmt::format("supervisor: {}; no restart left (--max-restarts {})",
                                        failure_text, args.max_restarts));
      write_job_summary(run_dir, failures, lost, unix_now() - started, false);
      return out.on_request ? 128 + forwarded_signal() : out.code;
    }
    const std::string line = fmt::format(
        "supervisor: restart {} of {} after: {} (last step logged {}, newest checkpoint "
        "step {}; {:.1f} s since it: the work to redo and the failure's detection){}",
        attempt + 1, args.max_restarts, failure_text, last_step, resumed_from, work, shrink);
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
