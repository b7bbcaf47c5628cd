// One MPI job under mpirun, watched: its ranks' output routed (rank 0 as is, others tagged),
// mpirun's banners parsed into one line per failure, signals forwarded, and optionally a
// heartbeat watchdog that stops a job whose rank made no progress (cli/launch_command.cpp
// builds the mpirun command; cli/supervisor.cpp restarts failed jobs).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace trillion::cli {

// How a forwarded signal is passed on. mpirun answers SIGTERM, SIGINT and SIGHUP by killing the
// ranks at once (SIGTERM, then SIGKILL), which leaves no time for the preemption checkpoint, but it
// passes SIGUSR2 on and waits for the ranks. So launch sends mpirun SIGUSR2 for those three
// (to_mpirun), and each rank's wrapper hands SIGUSR2 to its program as SIGTERM (to_rank_program):
// the program sees a stop request as it would without mpirun, and has time to checkpoint.
enum class SignalRoute { as_is, to_mpirun, to_rank_program };
// SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 go to `pid` from now on.
void forward_signals_to(pid_t pid, SignalRoute route = SignalRoute::as_is);
// waitpid through EINTR; stops forwarding.
int wait_for(pid_t pid);
// The last signal forwarded (0: none).
int forwarded_signal();

// Reads DIR/rank_R ("STEP PID", train/fault_drill.h) of every rank: a rank whose last beat is
// older than the timeout has stopped making progress. Among stale ranks a stopped process
// (state T) is the one that hung; the others are waiting for it in a collective. A rank with no
// beat yet is still starting (MPI, data, model, checkpoint load): it hangs once the attempt is
// older than startup_timeout.
// With stopped_only (launch's default watchdog, when no --heartbeat-timeout is given) only a
// rank stopped by a signal (state T; not t, a debugger's stop) for `timeout` seconds while
// another rank is not stopped is a hang: the ranks waiting for it spin in MPI at 100% CPU
// forever, and no step length makes that progress. A job stopped as a whole (a scheduler's
// suspend) is not one.
struct Watchdog {
  std::string dir;
  double timeout = 0;
  int processes = 0;
  double startup_timeout = 0;  // seconds; 0: a rank that never beats is never named
  bool stopped_only = false;

  struct Beat {
    int rank = -1;
    long long step = -1;
    int pid = 0;
    double age = 0;
    bool stopped = false;
    bool signal_stopped = false;  // state T (stopped by a signal), not t (a debugger's stop)
    bool starting = false;  // no beat yet: hung before its first step
  };
  // `attempt_age`: seconds since this attempt's mpirun started.
  bool hung(Beat& worst, double attempt_age) const;
};

struct JobOutcome {
  int code = 0;              // mpirun's exit code (0: success)
  std::string failure;       // one line when code != 0
  bool restartable = false;  // a rank died by a signal or hung (not a user error, not a request)
  bool on_request = false;   // stopped by a forwarded signal
  int failed_rank = -1;
  std::string failed_host;  // a host mpirun lost (all its ranks), when that was the failure
  // A hang: seconds from the hung rank's last heartbeat to the watchdog naming it (-1: no hang).
  double detected_seconds = -1;
};

// Runs `cmd` (mpirun ...) in its own process group. TRILLION_LAUNCH_VERBOSE shows everything.
JobOutcome run_job(const std::vector<std::string>& cmd, bool verbose, const Watchdog* watchdog);

}  // namespace trillion::cli
