// See job_runner.h.
#include "cli/job_runner.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <tuple>

#include "core/error.h"

namespace trillion::cli {

namespace {

// The child that signals go to (mpirun, or a rank's program), for the signal handler (a handler
// can reach nothing else).
volatile sig_atomic_t g_forward_pid = 0;
volatile sig_atomic_t g_forwarded_signal = 0;
volatile sig_atomic_t g_route = 0;  // a SignalRoute

extern "C" void forward_signal(int sig) {
  g_forwarded_signal = sig;
  int to_send = sig;
  if (g_route == static_cast<int>(SignalRoute::to_mpirun) &&
      (sig == SIGTERM || sig == SIGINT || sig == SIGHUP)) {
    to_send = SIGUSR2;
  } else if (g_route == static_cast<int>(SignalRoute::to_rank_program) && sig == SIGUSR2) {
    to_send = SIGTERM;
  }
  if (g_forward_pid > 0) ::kill(static_cast<pid_t>(g_forward_pid), to_send);
}

}  // namespace

void forward_signals_to(pid_t pid, SignalRoute route) {
  g_forward_pid = pid;
  g_route = static_cast<int>(route);
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

int forwarded_signal() {
  return g_forwarded_signal;
}

namespace {

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
    static const std::regex kErrorLine(R"(^trillion( [a-z-]+)?: (internal )?error: .*)");
    static const std::regex kDeath(R"(^trillion launch: rank \d+ (was killed by|cannot run) .*)");
    // Open MPI's shared-memory transport complaining that a peer's memory vanished ("[host:pid]
    // Read -1, expected 65536, errno = 3"): the echo of another rank's death, which the failure
    // line names; shown only with TRILLION_LAUNCH_VERBOSE.
    static const std::regex kPeerGone(
        R"(^\[[^\] ]+:\d+\] (Read|Write) -?\d+, expected \d+, errno = \d+\s*$)");
    if (is_err && std::regex_match(body, kPeerGone)) {
      report_.mpirun_lines.push_back(body);
      if (verbose_) std::fprintf(stderr, "%s\n", body.c_str());
      return;
    }
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
  // A whole host gone (its processes killed, its machine down): mpirun loses its daemon there,
  // and the ranks elsewhere fail only as its echo.
  static const std::regex kLostDaemon(R"(Remote daemon:\s*\S+ on node (\S+))");
  if (std::regex_search(mpirun_text, m, kLostDaemon)) {
    return fmt::format("trillion launch: host {} was lost (mpirun lost its daemon there)",
                       m[1].str());
  }
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
  // Without a banner, a rank's own error line is the cause; SIGTERM deaths are mpirun tearing
  // down the other ranks after it (Launch.FailingRankIsOneLineWithItsError named a bystander,
  // "rank 0 was killed by signal 15", about once in seven runs whenever the banner was missing).
  if (rank < 0 && !r.death.empty()) {
    for (const auto& [dead, line] : r.death) {
      if (line.find("killed by signal 15 ") == std::string::npos) return line;
    }
    if (r.error_line.empty()) return r.death.begin()->second;
  }
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

}  // namespace

bool Watchdog::hung(Beat& result, double attempt_age) const {
  // Each rank's last beat: "STEP PID", STEP -1 while it starts (train/fault_drill.h); no file yet
  // is a rank that has not even reached MPI_Init's end. A starting rank is overdue after the
  // start-up timeout, a training one after the heartbeat timeout, a stopped one (state T: it
  // cannot progress) after the heartbeat timeout whatever its phase.
  std::vector<Beat> beats;
  const auto now = std::filesystem::file_time_type::clock::now();
  for (int r = 0; r < processes; ++r) {
    const std::string path = fmt::format("{}/rank_{}", dir, r);
    Beat b;
    b.rank = r;
    b.starting = true;
    b.age = attempt_age;
    std::error_code ec;
    const auto mtime = std::filesystem::last_write_time(path, ec);
    if (!ec) {
      b.age = std::chrono::duration<double>(now - mtime).count();
      if (FILE* f = std::fopen(path.c_str(), "r")) {
        if (std::fscanf(f, "%lld %d", &b.step, &b.pid) != 2) b.step = -1, b.pid = 0;
        std::fclose(f);
      }
      b.starting = b.step < 0;
    }
    if (b.pid > 0) {
      // stdio, not ifstream: a process that exits between open and read makes read() fail with
      // ESRCH, which libstdc++'s filebuf turns into an exception; here it is just "not stopped".
      std::string text;
      if (FILE* f = std::fopen(fmt::format("/proc/{}/stat", b.pid).c_str(), "r")) {
        char chunk[512];
        for (size_t n; (n = std::fread(chunk, 1, sizeof chunk, f)) > 0;) text.append(chunk, n);
        std::fclose(f);
      }
      const size_t paren = text.rfind(')');
      b.stopped = paren != std::string::npos && paren + 2 < text.size() &&
                  (text[paren + 2] == 'T' || text[paren + 2] == 't');
      b.signal_stopped = b.stopped && text[paren + 2] == 'T';
    }
    beats.push_back(b);
  }
  if (stopped_only) {
    const bool one_runs = std::any_of(beats.begin(), beats.end(),
                                      [](const Beat& b) { return !b.signal_stopped; });
    std::optional<Beat> longest;
    for (const Beat& b : beats) {
      if (one_runs && b.signal_stopped && b.age > timeout && (!longest || b.age > longest->age)) {
        longest = b;
      }
    }
    if (longest) result = *longest;
    return longest.has_value();
  }
  auto overdue = [&](const Beat& b) {
    if (b.stopped) return b.age > timeout;
    if (b.starting) return startup_timeout > 0 && b.age > startup_timeout;
    return b.age > timeout;
  };
  // While a rank is still starting within its time, the others wait for it in their first
  // collective: their silence is not a hang.
  const bool still_starting = std::any_of(beats.begin(), beats.end(), [&](const Beat& b) {
    return b.starting && !b.stopped && !overdue(b);
  });
  std::optional<Beat> worst;
  for (const Beat& b : beats) {
    if (!overdue(b) || (still_starting && !b.stopped)) continue;
    // The culprit: a stopped process, else one that never started, else the longest silent.
    auto rank_of = [](const Beat& x) { return std::make_tuple(x.stopped, x.starting, x.age); };
    if (!worst || rank_of(b) > rank_of(*worst)) worst = b;
  }
  if (worst) result = *worst;
  return worst.has_value();
}

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
  forward_signals_to(pid, SignalRoute::to_mpirun);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);

  OutputRouter router(verbose);
  std::string pending[2];
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  char buf[8192];
  Watchdog::Beat beat;
  bool hang = false;
  const auto began = std::chrono::steady_clock::now();
  while (open_fds > 0) {
    const int ready = ::poll(fds, 2, watchdog ? 1000 : -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (watchdog && !hang) {
      hang = watchdog->hung(
          beat, std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
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
    const std::string timeout_name =
        watchdog->stopped_only
            ? fmt::format("stopped-rank timeout {:.0f} s, launch's default watchdog; "
                          "--stopped-timeout changes it",
                          watchdog->timeout)
            : fmt::format("heartbeat timeout {:.0f} s", watchdog->timeout);
    out.failure =
        beat.starting
            ? fmt::format(
                  "trillion launch: rank {} did not reach its first step: {} for {:.0f} s ({}); "
                  "the job was stopped",
                  beat.rank,
                  beat.stopped ? fmt::format("stopped (pid {})", beat.pid) : "still starting",
                  beat.age,
                  beat.stopped ? timeout_name
                               : fmt::format("start-up timeout {:.0f} s: MPI, data, model and "
                                             "checkpoint load",
                                             watchdog->startup_timeout))
            : fmt::format(
                  "trillion launch: rank {} made no progress for {:.0f} s after step {}{} "
                  "({}); the job was stopped",
                  beat.rank, beat.age, beat.step,
                  beat.stopped ? fmt::format(" (pid {} is stopped)", beat.pid) : std::string(),
                  timeout_name);
    out.restartable = true;
    out.failed_rank = beat.rank;
    out.detected_seconds = beat.age;
    return out;
  }
  if (out.code == 0) return out;
  out.failure = failure_line(router.report(), out.code);
  // A signal the user or the scheduler sent ends the job: the ranks mpirun then kills are its
  // consequence, not a machine's failure, so they are never restarted.
  out.on_request =
      g_forwarded_signal != 0 || out.failure.starts_with("trillion launch: the job stopped after");
  if (g_forwarded_signal != 0 &&
      !out.failure.starts_with("trillion launch: the job stopped after")) {
    out.failure = fmt::format("trillion launch: the job stopped after {} was forwarded to it ({})",
                              strsignal(g_forwarded_signal), out.failure);
  }
  // A rank killed by a signal is a machine's failure, worth a restart; a rank's own error (a
  // config, a divergence) would only fail again.
  static const std::regex kHost(R"(^trillion launch: host (\S+) was lost)");
  std::smatch m;
  if (std::regex_search(out.failure, m, kHost)) out.failed_host = m[1];
  out.restartable =
      !out.on_request && (!router.report().death.empty() || !out.failed_host.empty() ||
                          out.failure.find("was killed by signal") != std::string::npos);
  static const std::regex kRank(R"(^trillion launch: rank (\d+) )");
  if (std::regex_search(out.failure, m, kRank)) out.failed_rank = std::stoi(m[1]);
  return out;
}

}  // namespace trillion::cli
