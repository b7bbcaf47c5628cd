// A whole plan: the best layout for a model on N GPUs (searched, or the given layout with its
// free fields searched), its runners-up, and the run-level answers: total FLOPs (6ND and
// exact), tokens (given or Chinchilla-optimal), wall-clock days, GPU-hours and dollars, and the
// failure model (interruptions, checkpoint interval, goodput).
//
// Invariants: days, GPU-hours and dollars include failure losses (wall-clock / goodput);
// gpus <= kMaxGpus, seq_len <= kMaxSeqLen and batch sequences <= kMaxBatchSequences or the plan
// is refused naming where the value came from (an option or the model file's key);
// ideal_days does not. Every assumption the numbers rest on is listed in Plan::assumptions.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "plan/failures.h"
#include "plan/scale_out.h"
#include "plan/search.h"

namespace trillion::plan {

// The most GPUs a plan takes: 2^24 (a thousand times Llama 3's 16K), so every degree and
// product of degrees of a layout fits int.
constexpr long kMaxGpus = long{1} << 24;

struct PlanInputs {
  ModelSpec model;
  Gpu gpu;
  long gpus = 0;
  int64_t seq_len = 0;           // 0: the model's default
  double batch_tokens = 0;       // 0: the model's training batch, else ~16M tokens
  double tokens = 0;             // 0: Chinchilla-optimal for the model's total parameters
  SearchOptions search;          // fixed layout fields, precisions, how many to keep
  double restart_seconds = 600;  // per interruption: detect, relaunch, init, load
  double checkpoint_bytes_per_second = 0.4e9;  // per GPU write bandwidth to storage
  ScaleOutInputs scale_out;                    // data centres, DiLoCo, measured noise scale
  // A failure takes a host of host_gpus GPUs out for host_repair_seconds (0: a spare replaces
  // it at once); `elastic`: the job may run on the surviving hosts meanwhile (plan/failures.h).
  double host_repair_seconds = 0;
  bool elastic = false;
  int host_gpus = 8;
};

struct RunEstimate {
  double tokens = 0;
  bool chinchilla_tokens = false;
  double flops_6nd = 0;    // 6 x activated parameters x tokens
  double flops_exact = 0;  // model FLOPs per token (causal attention) x tokens
  double ideal_days = 0;   // tokens / throughput, no failures
  double days = 0;         // with checkpoints, lost work and restarts
  double gpu_hours = 0;
  double cost_usd = 0;
  double checkpoint_bytes_per_gpu = 0;
  double checkpoint_seconds = 0;
  int elastic_dp = 0;  // replicas an elastic restart keeps after losing a host (0: not elastic)
  FailureEstimate failures;
};

struct Plan {
  PlanInputs inputs;
  SearchResult search;  // ranked[0] is the plan
  RunEstimate run;
  ScaleOutEstimate scale_out;
  std::vector<std::pair<std::string, std::string>> assumptions;  // name -> how it was chosen
  const Candidate& best() const { return search.ranked.front(); }
};

Plan make_plan(PlanInputs inputs);

RunEstimate estimate_run(const PlanInputs& in, const Candidate& c);

}  // namespace trillion::plan
