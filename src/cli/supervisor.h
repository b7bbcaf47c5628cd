// The supervisor of `trillion launch --max-restarts K`: runs the job, restarts it (with
// --resume) after a rank dies or hangs, up to K times, and records each failure and the time it
// cost in events.log and summary.json. A failure loses the time since the newest checkpoint
// (the work to redo and the failure's detection: failure time - that step's metrics time) plus
// the restart (until the next attempt's first step began); goodput = 1 - lost / job wall time.
#pragma once

#include <string>
#include <vector>

namespace trillion::cli {

constexpr double kDefaultStartupTimeout = 600;
// Without --heartbeat-timeout, a rank stopped by a signal this long while others run is a hang
// (the others would spin in MPI forever): generous, since nothing else can be assumed of a job.
constexpr double kDefaultStoppedTimeout = 300;

struct SupervisorOptions {
  int processes = 0;
  std::vector<std::string> command;  // the subcommand and its arguments (train ... --run-dir D)
  int max_restarts = 0;
  double heartbeat_timeout = 0;  // seconds; 0: no watchdog
  // Seconds a rank may stay stopped (SIGSTOP) under the default watchdog of a `train` job that
  // has no heartbeat timeout; 0: none.
  double stopped_timeout = kDefaultStoppedTimeout;
  // Seconds a rank may take from its start to its first step (MPI, data, model, checkpoint
  // load) under the watchdog; 0: max(kDefaultStartupTimeout, heartbeat_timeout).
  double startup_timeout = 0;
  std::vector<std::string> faults;  // TRILLION_FAULTS items: kill:STEP:RANK, hang:..., corrupt:STEP
};

// `base` is the whole mpirun command line. Returns launch's exit code.
int supervise(const SupervisorOptions& options, const std::vector<std::string>& base, bool verbose);

}  // namespace trillion::cli
