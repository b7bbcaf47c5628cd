// The supervisor of `trillion launch --max-restarts K`: runs the job, restarts it (with
// --resume) after a rank dies or hangs, up to K times, and records each failure and the time it
// cost in events.log and summary.json. A failure loses the time since the newest checkpoint
// (the work to redo and the failure's detection: failure time - that step's metrics time) plus
// the restart (until the next attempt's first step began); goodput = 1 - lost / job wall time.
// With a hostfile, a failure names its host and that host's ranks (Open MPI's by-slot mapping);
// with --elastic the restart leaves that host out and runs the largest layout the hosts left
// hold: fewer data-parallel replicas d, each keeping its per-rank micro-batch, with the global
// batch kept by more gradient accumulation (train.micro_batch = d * (micro_batch / dp),
// train.grad_accum = global batch / that), resharding the newest checkpoint as --resume does.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace trillion::cli {

constexpr double kDefaultStartupTimeout = 600;
// Without --heartbeat-timeout, a rank stopped by a signal this long while others run is a hang
// (the others would spin in MPI forever): generous, since nothing else can be assumed of a job.
constexpr double kDefaultStoppedTimeout = 300;

// --elastic, filled in by launch from the run's config.
struct ElasticOptions {
  bool enabled = false;
  int replica_ranks = 1;  // pp * cp * tp: the ranks of one data-parallel replica
  int dp = 1;
  int64_t micro_batch = 0, grad_accum = 1;  // train.micro_batch is across all dp ranks
  // The mpirun command line for a hostfile and a process count (the subcommand's args last).
  std::function<std::vector<std::string>(const std::string& hostfile, int processes)> command;
};

// The largest replica count d <= dp that `slots` hold (d * replica_ranks <= slots) whose
// per-rank micro-batch divides the global batch; 0 when none. Sets micro_batch and grad_accum.
int elastic_replicas(const ElasticOptions& e, int slots, int64_t& micro_batch,
                     int64_t& grad_accum);

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
  std::string hostfile;             // the job's (absolute), when launch got --hostfile
  ElasticOptions elastic;
};

// `base` is the whole mpirun command line. Returns launch's exit code.
int supervise(const SupervisorOptions& options, const std::vector<std::string>& base, bool verbose);

}  // namespace trillion::cli
