// `trillion launch -n N [--hostfile F] [--mpirun PATH] [--program EXE] -- SUBCOMMAND ARGS...`:
// runs `trillion SUBCOMMAND ARGS...` as N MPI ranks under Open MPI's mpirun and turns what mpirun
// says into one line per failure.
//
// - Flags mpirun needs here are added for the user: --allow-run-as-root when running as root,
//   --oversubscribe when N exceeds this machine's cores and no hostfile says where slots are.
// - Ranks' output is tagged by mpirun (--tag-output) and re-emitted: rank 0's lines as they are,
//   other ranks' lines prefixed "[rank R] ". A rank's own error line ("trillion train: error: ...")
//   is held back and becomes the cause in the final report, so N ranks failing the same way print
//   one line. mpirun's own banners are never shown; they are parsed for the failed rank, its exit
//   code or signal. TRILLION_LAUNCH_VERBOSE=1 shows everything as it comes.
// - Each rank runs as `trillion launch --as-rank -- PROGRAM ...`, a wrapper that runs PROGRAM
//   as its child and reports a death by signal in one tagged line, so the failed rank is known
//   even when mpirun's own banner does not name it (it often does not under load).
// - SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 are forwarded to mpirun (which runs in its own
//   process group, so a terminal's Ctrl-C reaches the job once, through us).
// - Inside a job that a launcher already started (srun, mpirun by hand: the MPI environment
//   variables are set), the subcommand is exec'd in place, after checking -n against the job size.
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "comm/mpi_communicator.h"
#include "core/error.h"
#include "data/file_io.h"

namespace trillion::cli {

namespace {

// The child that signals go to (mpirun, or a rank's program), for the signal handler (a handler
// can reach nothing else).
volatile sig_atomic_t g_forward_pid = 0;
volatile sig_atomic_t g_forwarded_signal = 0;

extern "C" void forward_signal(int sig) {
  g_forwarded_signal = sig;
  if (g_forward_pid > 0) ::kill(static_cast<pid_t>(g_forward_pid), sig);
}

void forward_signals_to(pid_t pid) {
  g_forward_pid = pid;
  struct sigaction sa {};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) ::sigaction(sig, &sa, nullptr);
}

int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_forward_pid = 0;
  return status;
}

struct LaunchArgs {
  int processes = 0;
  std::string hostfile;
  std::string mpirun = "mpirun";
  std::string program;  // empty: this trillion binary
  std::vector<std::string> command;
  // The supervisor (see supervise below).
  int max_restarts = 0;
  double heartbeat_timeout = 0;     // seconds; 0: no watchdog
  std::vector<std::string> faults;  // TRILLION_FAULTS items: kill:STEP:RANK, hang:..., corrupt:STEP
};

constexpr const char* kUsage =
    "usage: trillion launch -n N [--hostfile FILE] [--mpirun PATH] [--program EXE]\n"
    "       [--max-restarts K] [--heartbeat-timeout SECONDS] [--fail-at STEP:RANK]\n"
    "       [--hang-at STEP:RANK] [--corrupt-checkpoint STEP] -- SUBCOMMAND [ARGS...]\n"
    "  e.g. trillion launch -n 4 -- train configs/tiny.toml --run-dir runs/dp4 --set "
    "parallel.dp=4\n";

LaunchArgs parse_args(int argc, char** argv) {
  LaunchArgs a;
  int i = 1;
  auto value = [&](const char* flag) -> std::string {
    if (i + 1 >= argc) throw Error(fmt::format("{} needs a value\n{}", flag, kUsage));
    return argv[++i];
  };
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-n" || arg == "--np" || arg == "-np") {
      const std::string v = value("-n");
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || n < 1 || n > 1 << 20) {
        throw Error(fmt::format("-n {} is not a process count; give a whole number >= 1", v));
      }
      a.processes = static_cast<int>(n);
    } else if (arg == "--hostfile") {
      a.hostfile = value("--hostfile");
    } else if (arg == "--mpirun") {
      a.mpirun = value("--mpirun");
    } else if (arg == "--program") {
      a.program = value("--program");
    } else if (arg == "--max-restarts") {
      const std::string v = value("--max-restarts");
      char* end = nullptr;
      const long k = std::strtol(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || k < 0 || k > 1000) {
        throw Error(fmt::format("--max-restarts {}: give a whole number in [0, 1000]", v));
      }
      a.max_restarts = static_cast<int>(k);
    } else if (arg == "--heartbeat-timeout") {
      const std::string v = value("--heartbeat-timeout");
      char* end = nullptr;
      const double t = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(t >= 1 && t <= 86400)) {
        throw Error(fmt::format("--heartbeat-timeout {}: give seconds in [1, 86400]", v));
      }
      a.heartbeat_timeout = t;
    } else if (arg == "--fail-at" || arg == "--hang-at") {
      const std::string v = value(arg.c_str());
      long long step = 0;
      int rank = -1;
      char tail = 0;
      if (std::sscanf(v.c_str(), "%lld:%d%c", &step, &rank, &tail) != 2 || step < 1 || rank < 0) {
        throw Error(fmt::format("{} {}: expected STEP:RANK, e.g. 5:1 (after step 5, rank 1)", arg,
                                v));
      }
      a.faults.push_back(fmt::format("{}:{}:{}", arg == "--fail-at" ? "kill" : "hang", step, rank));
    } else if (arg == "--corrupt-checkpoint") {
      const std::string v = value("--corrupt-checkpoint");
      char* end = nullptr;
      const long long step = std::strtoll(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || step < 1) {
        throw Error(fmt::format("--corrupt-checkpoint {}: give the step of a checkpoint", v));
      }
      a.faults.push_back(fmt::format("corrupt:{}", step));
    } else {
      throw Error(fmt::format("unknown launch option '{}'; put the subcommand after '--'\n{}", arg,
                              kUsage));
    }
  }
  for (; i < argc; ++i) a.command.push_back(argv[i]);
  if (a.processes == 0) throw Error(std::string("missing -n N (number of processes)\n") + kUsage);
  if (a.command.empty()) {
    throw Error(std::string("missing the subcommand to run after '--'\n") + kUsage);
  }
  if (!a.hostfile.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(a.hostfile, ec) || ::access(a.hostfile.c_str(), R_OK)) {
      throw Error(
          fmt::format("--hostfile {}: not a readable file (one line per machine: 'host "
                      "slots=K')",
                      a.hostfile));
    }
  }
  return a;
}

std::string self_path() {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error("cannot find the trillion binary via /proc/self/exe: " + ec.message());
  return p.string();
}

std::optional<std::string> find_on_path(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    if (::access(name.c_str(), X_OK) == 0) return name;
    return std::nullopt;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string candidate = dirs.substr(start, end - start) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return std::nullopt;
}

[[noreturn]] void exec_or_throw(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& s : args) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  ::execv(argv[0], argv.data());
  throw Error(fmt::format("cannot run {}: {}", args[0], std::strerror(errno)));
}

// What the ranks and mpirun said, for the final report.
struct JobReport {
  std::map<int, std::string> death;        // rank -> its wrapper's "killed by signal" line
  std::map<int, std::string> error_line;   // rank -> its trillion error line
  std::map<int, std::string> last_stderr;  // rank -> last line it wrote to stderr
  std::vector<std::string> mpirun_lines;   // untagged output of mpirun itself
};

class OutputRouter {
 public:
  explicit OutputRouter(bool verbose) : verbose_(verbose) {}

  void feed(std::string& pending, const char* data, size_t n, bool flush) {
    pending.append(data, n);
    size_t pos;
    while ((pos = pending.find('\n')) != std::string::npos) {
      line(pending.substr(0, pos));
      pending.erase(0, pos + 1);
    }
    if (flush && !pending.empty()) {
      line(pending);
      pending.clear();
    }
  }
  JobReport& report() { return report_; }

 private:
  void line(std::string text) {
    // mpirun can glue its banner dashes to the next tagged line.
    const size_t tag = text.find("[1,");
    if (tag != std::string::npos && tag > 0 && text.find_first_not_of('-') == tag) {
      report_.mpirun_lines.push_back(text.substr(0, tag));
      text.erase(0, tag);
    }
    static const std::regex kTagged(R"(^\[\d+,(\d+)\]<(stdout|stderr)>:(.*)$)");
    std::smatch m;
    if (!std::regex_match(text, m, kTagged)) {
      report_.mpirun_lines.push_back(text);
      if (verbose_) std::fprintf(stderr, "%s\n", text.c_str());
      return;
    }
    const int rank = std::stoi(m[1]);
    const bool is_err = m[2] == "stderr";
    const std::string body = m[3];
    static const std::regex kErrorLine(R"(^trillion [a-z-]+: (internal )?error: .*)");
    static const std::regex kDeath(R"(^trillion launch: rank \d+ (was killed by|cannot run) .*)");
    if (is_err && std::regex_match(body, kDeath)) {
      report_.death.emplace(rank, body);
      return;
    }
    if (is_err && !body.empty()) report_.last_stderr[rank] = body;
    if (is_err && std::regex_match(body, kErrorLine)) {
      report_.error_line.emplace(rank, body);
      if (!verbose_) return;
    }
    FILE* out = is_err ? stderr : stdout;
    if (rank == 0) {
      std::fprintf(out, "%s\n", body.c_str());
    } else {
      std::fprintf(out, "[rank %d] %s\n", rank, body.c_str());
    }
    std::fflush(out);
  }

  bool verbose_;
  JobReport report_;
};

// One line: which rank failed and why, from the ranks' error lines and mpirun's banners.
std::string failure_line(const JobReport& r, int exit_status) {
  std::string mpirun_text;
  for (const std::string& l : r.mpirun_lines) mpirun_text += l + "\n";
  std::smatch m;
  int rank = -1;
  std::string how;
  static const std::regex kSignal(
      R"(process rank (\d+) with PID (\d+) on node (\S+) exited on signal (\d+) \(([^)]*)\))");
  static const std::regex kExit(R"(Process name: \[\[\d+,\d+\],(\d+)\]\s*\n\s*Exit code:\s*(\d+))");
  if (std::regex_search(mpirun_text, m, kSignal)) {
    rank = std::stoi(m[1]);
    how = fmt::format("was killed by signal {} ({}) on {}", m[4].str(), m[5].str(), m[3].str());
  } else if (std::regex_search(mpirun_text, m, kExit)) {
    rank = std::stoi(m[1]);
    how = "exited with code " + m[2].str();
  }
  // The rank wrappers name the rank a signal killed even when mpirun's banner does not.
  if (auto it = r.death.find(rank); it != r.death.end()) return it->second;
  if (rank < 0 && !r.death.empty()) return r.death.begin()->second;
  if (rank < 0 && !r.error_line.empty()) {
    // mpirun does not always print its "Process name / Exit code" banner; its own exit status is
    // the first failed process's code.
    rank = r.error_line.begin()->first;
    how = fmt::format("exited with code {}", exit_status);
  }
  if (rank >= 0) {
    std::string cause;
    if (auto it = r.error_line.find(rank); it != r.error_line.end()) {
      cause = it->second;
    } else if (!r.error_line.empty()) {
      cause = fmt::format("rank {}: {}", r.error_line.begin()->first, r.error_line.begin()->second);
    } else if (auto jt = r.last_stderr.find(rank); jt != r.last_stderr.end()) {
      cause = jt->second;
    }
    return fmt::format("trillion launch: rank {} {}{}{}", rank, how, cause.empty() ? "" : ": ",
                       cause);
  }
  if (g_forwarded_signal != 0) {
    return fmt::format(
        "trillion launch: the job stopped after {} was forwarded to it (mpirun "
        "status {})",
        strsignal(g_forwarded_signal), exit_status);
  }
  // mpirun failed before or around the ranks: name the first known reason it gave.
  static const std::pair<const char*, const char*> kKnown[] = {
      {"not enough slots",
       "not enough slots for the requested processes; lower -n, add hosts "
       "or slots to the hostfile"},
      {"could not access or execute",
       "mpirun could not execute the program on some host; "
       "install trillion at the same path on every machine"},
      {"ORTE was unable to reliably start",
       "mpirun could not start its daemons on the hosts "
       "(check passwordless ssh and the hostfile names)"},
      {"open hostfile", "mpirun could not open the hostfile"},
  };
  for (const auto& [needle, message] : kKnown) {
    if (mpirun_text.find(needle) != std::string::npos) {
      return std::string("trillion launch: ") + message;
    }
  }
  for (const std::string& l : r.mpirun_lines) {
    if (l.find_first_not_of("- \t") != std::string::npos) {
      return fmt::format("trillion launch: mpirun failed (status {}): {}", exit_status, l);
    }
  }
  return fmt::format("trillion launch: mpirun failed with status {}", exit_status);
}

// ---- One job, watched; and the supervisor that restarts it -------------------------------------

struct JobOutcome {
  int code = 0;          // mpirun's exit code (0: success)
  std::string failure;   // one line when code != 0
  bool restartable = false;  // a rank died by a signal or hung (not a user error, not a request)
  bool on_request = false;   // stopped by a forwarded signal
  int failed_rank = -1;
};

// Reads DIR/rank_R ("STEP PID") of every rank: a rank whose last beat is older than the timeout
// has stopped making progress. Among stale ranks a stopped process (state T) is the one that
// hung; the others are waiting for it in a collective.
struct Watchdog {
  std::string dir;
  double timeout = 0;
  int processes = 0;

  struct Beat {
    int rank = -1;
    long long step = -1;
    int pid = 0;
    double age = 0;
    bool stopped = false;
  };
  std::optional<Beat> hung() const {
    std::optional<Beat> worst;
    const auto now = std::filesystem::file_time_type::clock::now();
    for (int r = 0; r < processes; ++r) {
      const std::string path = fmt::format("{}/rank_{}", dir, r);
      std::error_code ec;
      const auto mtime = std::filesystem::last_write_time(path, ec);
      if (ec) continue;  // not started training yet
      Beat b;
      b.rank = r;
      b.age = std::chrono::duration<double>(now - mtime).count();
      if (FILE* f = std::fopen(path.c_str(), "r")) {
        if (std::fscanf(f, "%lld %d", &b.step, &b.pid) != 2) b.step = -1, b.pid = 0;
        std::fclose(f);
      }
      if (b.pid > 0) {
        std::ifstream stat(fmt::format("/proc/{}/stat", b.pid));
        std::string text((std::istreambuf_iterator<char>(stat)), {});
        const size_t paren = text.rfind(')');
        b.stopped = paren != std::string::npos && paren + 2 < text.size() &&
                    (text[paren + 2] == 'T' || text[paren + 2] == 't');
      }
      if (b.age <= timeout) continue;
      if (!worst || (b.stopped && !worst->stopped) ||
          (b.stopped == worst->stopped && b.age > worst->age)) {
        worst = b;
      }
    }
    return worst;
  }
};

JobOutcome run_job(const std::vector<std::string>& cmd, bool verbose, const Watchdog* watchdog) {
  int out_pipe[2], err_pipe[2];
  if (::pipe(out_pipe) != 0 || ::pipe(err_pipe) != 0) {
    throw Error(std::string("cannot create pipes: ") + std::strerror(errno));
  }
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("cannot fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
    std::vector<char*> cargv;
    for (const std::string& s : cmd) cargv.push_back(const_cast<char*>(s.c_str()));
    cargv.push_back(nullptr);
    ::execv(cargv[0], cargv.data());
    std::fprintf(stderr, "cannot run %s: %s\n", cargv[0], std::strerror(errno));
    ::_exit(127);
  }
  forward_signals_to(pid);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);

  OutputRouter router(verbose);
  std::string pending[2];
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  char buf[8192];
  std::optional<Watchdog::Beat> hang;
  while (open_fds > 0) {
    const int ready = ::poll(fds, 2, watchdog ? 1000 : -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (watchdog && !hang) {
      hang = watchdog->hung();
      if (hang) {  // the whole job goes: the stopped rank, and the ranks waiting for it
        ::kill(-pid, SIGKILL);
        for (int r = 0; r < watchdog->processes; ++r) {
          if (FILE* f = std::fopen(fmt::format("{}/rank_{}", watchdog->dir, r).c_str(), "r")) {
            long long step;
            int rank_pid = 0;
            if (std::fscanf(f, "%lld %d", &step, &rank_pid) == 2 && rank_pid > 0) {
              ::kill(rank_pid, SIGKILL);
            }
            std::fclose(f);
          }
        }
      }
    }
    for (int k = 0; k < 2; ++k) {
      if (fds[k].fd < 0 || fds[k].revents == 0) continue;
      const ssize_t n = ::read(fds[k].fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        router.feed(pending[k], buf, 0, true);
        ::close(fds[k].fd);
        fds[k].fd = -1;
        --open_fds;
      } else {
        router.feed(pending[k], buf, static_cast<size_t>(n), false);
      }
    }
  }
  const int status = wait_for(pid);
  JobOutcome out;
  out.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (hang) {
    out.code = out.code == 0 ? 1 : out.code;
    out.failure = fmt::format(
        "trillion launch: rank {} made no progress for {:.0f} s after step {}{} (heartbeat "
        "timeout {:.0f} s); the job was stopped",
        hang->rank, hang->age, hang->step,
        hang->stopped ? fmt::format(" (pid {} is stopped)", hang->pid) : std::string(),
        watchdog->timeout);
    out.restartable = true;
    out.failed_rank = hang->rank;
    return out;
  }
  if (out.code == 0) return out;
  out.failure = failure_line(router.report(), out.code);
  out.on_request = out.failure.starts_with("trillion launch: the job stopped after");
  // A rank killed by a signal is a machine's failure, worth a restart; a rank's own error (a
  // config, a divergence) would only fail again.
  out.restartable = !out.on_request && (!router.report().death.empty() ||
                                        out.failure.find("was killed by signal") != std::string::npos);
  static const std::regex kRank(R"(^trillion launch: rank (\d+) )");
  std::smatch m;
  if (std::regex_search(out.failure, m, kRank)) out.failed_rank = std::stoi(m[1]);
  return out;
}

std::string value_after(const std::vector<std::string>& args, const std::string& flag) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == flag) return args[i + 1];
    if (args[i].starts_with(flag + "=")) return args[i].substr(flag.size() + 1);
  }
  return "";
}

// The metrics lines of a run directory as (step, time, seconds).
struct StepTime {
  long long step;
  double time, seconds;
};
std::vector<StepTime> read_step_times(const std::string& run_dir) {
  std::vector<StepTime> out;
  std::ifstream in(run_dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    try {
      const auto j = nlohmann::json::parse(line);
      out.push_back({j.value("step", 0LL), j.value("time", 0.0), j.value("seconds", 0.0)});
    } catch (const nlohmann::json::exception&) {
      // a torn last line of a killed run
    }
  }
  return out;
}

long long newest_checkpoint_step(const std::string& run_dir) {
  long long best = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(run_dir + "/checkpoints", ec)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("step_")) best = std::max(best, std::atoll(name.c_str() + 5));
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

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Runs the job; with --max-restarts K, restarts it (with --resume) after a rank dies or hangs,
// up to K times, and records each failure and the time it cost in events.log and summary.json:
// a failure loses the work since the newest checkpoint (failure time - that step's metrics
// time) plus the restart (until the next attempt's first step began); goodput is
// 1 - lost / wall time of the whole job.
int supervise(const LaunchArgs& args, const std::vector<std::string>& base, bool verbose) {
  const bool supervised = args.max_restarts > 0 || args.heartbeat_timeout > 0 || !args.faults.empty();
  const std::string run_dir = value_after(args.command, "--run-dir");
  if (supervised && (args.command[0] != "train" || run_dir.empty())) {
    throw Error("--max-restarts, --heartbeat-timeout and the fault drills supervise "
                "`train ... --run-dir DIR` (the run directory holds the checkpoints a restart "
                "resumes from)");
  }
  if (!args.faults.empty()) {
    std::string spec;
    for (const std::string& f : args.faults) spec += (spec.empty() ? "" : ",") + f;
    ::setenv("TRILLION_FAULTS", spec.c_str(), 1);
  }
  Watchdog watchdog{run_dir + "/.heartbeat", args.heartbeat_timeout, args.processes};
  const double started = unix_now();
  nlohmann::json failures = nlohmann::json::array();
  double lost = 0;
  double failed_at = 0;
  long long resumed_from = -1;
  for (int attempt = 0;; ++attempt) {
    std::vector<std::string> cmd = base;
    const bool has_resume = std::find(args.command.begin(), args.command.end(), "--resume") !=
                            args.command.end();
    if (attempt > 0 && !has_resume) cmd.push_back("--resume");
    if (supervised) {
      std::error_code ec;
      std::filesystem::remove_all(watchdog.dir, ec);
      std::filesystem::create_directories(watchdog.dir, ec);
      ::setenv("TRILLION_HEARTBEAT_DIR", watchdog.dir.c_str(), 1);
    }
    const JobOutcome out = run_job(cmd, verbose, args.heartbeat_timeout > 0 ? &watchdog : nullptr);
    if (attempt > 0 && resumed_from >= 0) {  // the restart's cost: until the first new step began
      for (const StepTime& t : read_step_times(run_dir)) {
        if (t.step == resumed_from + 1 && t.time > 0) {
          const double restart = std::max(0.0, t.time - t.seconds - failed_at);
          lost += restart;
          failures.back()["restart_seconds"] = restart;
          failures.back()["lost_seconds"] = failures.back()["lost_seconds"].get<double>() + restart;
          break;
        }
      }
    }
    if (out.code == 0) break;
    const bool retry = out.restartable && attempt < args.max_restarts;
    if (!supervised || !retry) {
      std::fprintf(stderr, "%s\n", out.failure.c_str());
      if (supervised && out.restartable) {
        append_event(run_dir, fmt::format("supervisor: {}; no restart left (--max-restarts {})",
                                          out.failure, args.max_restarts));
      }
      return out.on_request ? 128 + g_forwarded_signal : out.code;
    }
    // The work since the newest checkpoint is lost.
    failed_at = unix_now();
    const auto steps = read_step_times(run_dir);
    resumed_from = newest_checkpoint_step(run_dir);
    long long last_step = steps.empty() ? 0 : steps.back().step;
    double since = started;
    for (const StepTime& t : steps) {
      if (t.step == resumed_from && t.time > 0) since = t.time;
    }
    const double work = std::max(0.0, failed_at - std::max(since, started));
    lost += work;
    failures.push_back({{"attempt", attempt + 1},
                        {"rank", out.failed_rank},
                        {"last_step", last_step},
                        {"resumed_from", resumed_from},
                        {"cause", out.failure},
                        {"lost_seconds", work}});
    const std::string line = fmt::format(
        "supervisor: restart {} of {} after: {} (last step logged {}, newest checkpoint "
        "step {}; {:.1f} s since it: the work to redo and the failure's detection)",
        attempt + 1, args.max_restarts, out.failure, last_step, resumed_from, work);
    std::fprintf(stderr, "%s\n", line.c_str());
    append_event(run_dir, line);
  }
  if (supervised) {
    const double wall = unix_now() - started;
    const std::string path = run_dir + "/summary.json";
    std::ifstream in(path);
    nlohmann::json summary = nlohmann::json::object();
    try {
      summary = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception&) {
    }
    summary["restarts"] = failures.size();
    summary["failures"] = failures;
    summary["lost_seconds"] = lost;
    summary["job_seconds"] = wall;
    summary["goodput"] = wall > 0 ? 1.0 - lost / wall : 1.0;
    data::write_file_atomic(path, {summary.dump(2) + "\n"});
    if (!failures.empty()) {
      append_event(run_dir, fmt::format("supervisor: finished after {} restart(s): {:.1f} s lost "
                                        "of {:.1f} s, goodput {:.3f}",
                                        failures.size(), lost, wall, summary["goodput"].get<double>()));
    }
  }
  return 0;
}

}  // namespace

// The rank side: `trillion launch --as-rank -- PROGRAM ARGS...`, what mpirun starts on every
// rank. Runs PROGRAM as a child (it inherits the MPI environment and initialises MPI itself),
// forwards signals to it, and when a signal kills it says so in one tagged line, because mpirun
// does not always report which rank died.
int run_as_rank(int argc, char** argv) {
  const comm::LaunchEnvironment env = comm::launch_environment();
  std::vector<std::string> program(argv + 3, argv + argc);
  if (program.empty()) throw Error("--as-rank needs a program after '--'");
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("cannot fork: ") + std::strerror(errno));
  if (pid == 0) {
    std::vector<char*> cargv;
    for (const std::string& a : program) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    ::execv(cargv[0], cargv.data());
    std::fprintf(stderr, "trillion launch: rank %d cannot run %s: %s\n", env.rank, cargv[0],
                 std::strerror(errno));
    ::_exit(127);
  }
  forward_signals_to(pid);
  const int status = wait_for(pid);
  if (WIFSIGNALED(status)) {
    char host[256] = "?";
    ::gethostname(host, sizeof(host) - 1);
    std::fprintf(stderr, "trillion launch: rank %d was killed by signal %d (%s) on %s\n", env.rank,
                 WTERMSIG(status), strsignal(WTERMSIG(status)), host);
    return 128 + WTERMSIG(status);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int launch_command(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "--as-rank") == 0 && std::strcmp(argv[2], "--") == 0) {
    return run_as_rank(argc, argv);
  }
  for (int i = 1; i < argc && std::strcmp(argv[i], "--") != 0; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf("%s", kUsage);
      return 0;
    }
  }
  const LaunchArgs args = parse_args(argc, argv);
  std::vector<std::string> program = {args.program.empty() ? self_path() : args.program};
  program.insert(program.end(), args.command.begin(), args.command.end());

  // Already one rank of a job (srun, or mpirun started by hand): become the subcommand.
  const comm::LaunchEnvironment env = comm::launch_environment();
  if (env.found) {
    if (env.size > 0 && env.size != args.processes) {
      throw Error(
          fmt::format("-n {} but this job already has {} processes ({}); use -n {} or "
                      "start the job with {} processes",
                      args.processes, env.size, env.source, env.size, args.processes));
    }
    exec_or_throw(program);
  }

  const auto mpirun = find_on_path(args.mpirun);
  if (!mpirun) {
    throw Error(
        fmt::format("'{}' not found; install Open MPI (openmpi-bin, see scripts/setup.sh) "
                    "or pass --mpirun PATH",
                    args.mpirun));
  }
  std::vector<std::string> cmd = {*mpirun, "--tag-output", "-n", std::to_string(args.processes)};
  if (::geteuid() == 0) cmd.push_back("--allow-run-as-root");
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  if (args.hostfile.empty() && static_cast<unsigned>(args.processes) > cores) {
    cmd.push_back("--oversubscribe");
  }
  if (!args.hostfile.empty()) {
    cmd.push_back("--hostfile");
    cmd.push_back(args.hostfile);
  }
  // Forward the thread settings to ranks on other machines (local ranks inherit everything).
  for (const char* var : {"OMP_NUM_THREADS", "OMP_WAIT_POLICY", "OPENBLAS_NUM_THREADS"}) {
    if (std::getenv(var) != nullptr) {
      cmd.push_back("-x");
      cmd.push_back(var);
    }
  }
  // Every rank runs through this binary's rank wrapper (run_as_rank below).
  for (const std::string& w :
       {self_path(), std::string("launch"), std::string("--as-rank"), std::string("--")}) {
    cmd.push_back(w);
  }
  cmd.insert(cmd.end(), program.begin(), program.end());

  const char* verbose_env = std::getenv("TRILLION_LAUNCH_VERBOSE");
  const bool verbose = verbose_env != nullptr && std::strcmp(verbose_env, "0") != 0;
  if (verbose) {
    std::string line;
    for (const std::string& s : cmd) line += s + " ";
    std::fprintf(stderr, "trillion launch: %s\n", line.c_str());
  }

  return supervise(args, cmd, verbose);
}

}  // namespace trillion::cli
