// StepRunner: one optimizer step of a run = the rank's pipeline schedule over its stage models
// (grad_accum micro-batches; with pp = 1 the one-stage schedule, or parallel.chunks stages of one
// process), gradient reduction across the data-parallel group (parallel/data.h: buckets started
// during backward, ZeRO stage 0-3), global-norm clipping, a learning rate from the schedule, and
// an AdamW or LAMB update of this rank's parameters. The trainer, `trillion bench step` and the
// tests all step through this one class, so what is benchmarked is what trains.
//
// train.micro_batch is the global micro-batch: this rank runs micro_batch / dp sequences of it.
// With one process (no dp group given) the step is exactly the one-process algorithm.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "comm/communicator.h"
#include "model/stage_model.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "parallel/data.h"
#include "parallel/pipeline/executor.h"
#include "schedule/action.h"
#include "train/run_config.h"

namespace trillion {

struct StepStats {
  double loss = 0;  // mean over the step's global batch
  double lr = 0;
  double grad_norm = 0;  // before clipping, over all shards
  int64_t tokens = 0;    // global
  double seconds = 0;
  uint64_t comm_bytes = 0;       // bytes this rank sent in the step, all collectives
  comm::CommCounters comm;       // the dp group's counters for the step, per collective kind
  double comm_wait_seconds = 0;  // time blocked on gradient reductions after backward
};

// Fills tokens and targets ([B_local*T] each) for this rank's part of micro-batch `micro` of
// step `step`.
using BatchSource =
    std::function<void(int64_t step, int64_t micro, int32_t* tokens, int32_t* targets)>;

class StepRunner {
 public:
  // dp: the data-parallel group, of size config.parallel.dp (nullptr: one process).
  StepRunner(const RunConfig& config, Backend& backend, MemoryTracker& tracker,
             comm::Communicator* dp = nullptr);

  StepStats step(int64_t step_index, const BatchSource& batches);
  // Mean loss of one micro-batch, forward only (validation).
  double evaluate(const int32_t* tokens, const int32_t* targets);
  // Initial parameters, identical for every layout.
  void init_parameters(uint64_t seed) { parallel_->init_parameters(seed); }

  ParameterSet& parameters() { return *params_; }
  const TensorTable& table() const { return params_->table(); }
  int num_stages() const { return static_cast<int>(stages_.size()); }
  StageModel& stage(int chunk) { return *stages_.at(chunk); }
  const schedule::Schedule& schedule() const { return schedule_; }
  Optimizer& optimizer() { return *optimizer_; }
  parallel::DataParallel& data_parallel() { return *parallel_; }
  const LrSchedule& lr_schedule() const { return lr_schedule_; }
  int64_t tokens_per_step() const;  // global
  int64_t local_micro_batch() const { return config_.train.micro_batch / dp_.size(); }
  const ParallelContext& context() const { return ctx_; }

 private:
  RunConfig config_;
  Backend& be_;
  std::unique_ptr<comm::Communicator> local_;  // the group of one when no dp group is given
  comm::Communicator& dp_;
  ParallelContext ctx_;
  schedule::Schedule schedule_;
  std::unique_ptr<ParameterSet> params_;
  std::vector<std::unique_ptr<StageModel>> stages_;  // per chunk of this rank
  std::unique_ptr<parallel::DataParallel> parallel_;
  std::unique_ptr<parallel::PipelineExecutor> executor_;
  std::unique_ptr<Optimizer> optimizer_;
  LrSchedule lr_schedule_;
};

}  // namespace trillion
