// The failure model of a run: expected interruptions from a per-GPU failure rate, the optimal
// checkpoint interval (Young 1974; Daly 2006's higher-order form) from the checkpoint write time
// and the cluster's MTBF, and goodput (useful time over wall-clock time) once checkpoint writes,
// lost work and restarts are paid.
//
// Invariants: failures are a Poisson process with rate gpus x per-GPU rate (a GPU's share of
// host, network and software failures included, as Llama 3 reports them); times are seconds,
// rates per hour where named so.
#pragma once

#include <cstdint>

namespace trillion::plan {

// gpus x rate x hours.
double expected_interruptions(long gpus, double failures_per_gpu_hour, double hours);

// Young: sqrt(2 delta M). Daly (2006, eq. 37): sqrt(2 delta M)(1 + sqrt(delta/(2M))/3 +
// delta/(18 M)) - delta when delta < 2M, else M.
double young_interval(double checkpoint_seconds, double mtbf_seconds);
double daly_interval(double checkpoint_seconds, double mtbf_seconds);

struct FailureInputs {
  long gpus = 0;
  double failures_per_gpu_hour = 0;
  double checkpoint_seconds = 0;  // blocking time to write one checkpoint
  double restart_seconds = 600;   // detect, relaunch, re-initialise, load the checkpoint
  double ideal_seconds = 0;       // the run without failures or checkpoints
  // Each interruption takes a host out for host_repair_seconds (0: a spare host takes its place
  // and the restart is all it costs). Meanwhile the job waits for it (its restart needs the host
  // count), or, when shrunk_speed > 0, runs elastic (the engine's launch --elastic: fewer dp
  // replicas on the surviving hosts, the global batch kept by accumulation) at shrunk_speed of its
  // throughput and restarts once more to grow back; each failure takes the cheaper of the two.
  double host_repair_seconds = 0;
  double shrunk_speed = 0;
};

struct FailureEstimate {
  double mtbf_seconds = 0;         // of the whole cluster
  double checkpoint_interval = 0;  // seconds of training between checkpoints (Daly)
  double wall_seconds = 0;         // with checkpoints, lost work and restarts
  double expected_interruptions = 0;
  double goodput = 0;  // ideal_seconds / wall_seconds
  double checkpoint_overhead = 0, rework_overhead = 0, restart_overhead = 0;  // seconds
  // Per failure: restart + half a cycle of rework + the host's repair cost, which is
  // host_repair_seconds when waiting, or host_repair_seconds x (1 - shrunk_speed) + restart when
  // running elastic (elastic = true when that is the cheaper).
  double lost_per_failure = 0, repair_cost = 0, repair_overhead = 0;
  bool elastic = false;
};

// The data-parallel replicas an elastic restart keeps after losing one host of host_gpus GPUs,
// as the engine's launch --elastic chooses them: a replica is tp x pp x cp GPUs (replica_gpus);
// the host takes max(1, host_gpus / replica_gpus) replicas with it; of the rest, the largest d
// whose replicas split the step's `micro_batches` (global batch / per-replica micro-batch) evenly
// and whose d x cp positions ep divides. 0 when none is left.
int elastic_replicas(int dp, int cp, int ep, long replica_gpus, int host_gpus,
                     int64_t micro_batches);

// Goodput at a given checkpoint interval (not the optimal one): what a drill with a known failure
// rate runs at. Each failure (mean time between them M, wall clock) loses a restart R and on
// average half a cycle of work plus its write, (tau + delta)/2; every cycle pays delta.
struct IntervalGoodput {
  double lost_per_failure = 0;  // R + (tau + delta)/2
  double kept = 0;     // 1 - lost_per_failure / M: the supervisor's goodput (writes count as kept)
  double goodput = 0;  // kept / (1 + delta/tau): training time over wall time
};
// Throws Error unless tau > 0, delta >= 0, R >= 0, M > 0; kept and goodput are 0 when a failure
// loses more than M.
IntervalGoodput goodput_at_interval(double mtbf_seconds, double interval_seconds,
                                    double checkpoint_seconds, double restart_seconds);

// First-order accounting (Daly 2006 §3): every interval tau of work costs a write delta; each
// failure loses on average half an interval plus its write and a restart R. So
// wall = ideal (1 + delta/tau) / (1 - (R + (tau + delta)/2) / M).
FailureEstimate estimate_failures(const FailureInputs& in);

}  // namespace trillion::plan
