// StepRunner: one optimizer step of a run = grad_accum micro-batches of forward + backward,
// gradient reduction across the data-parallel group (parallel/data.h: buckets started during
// backward, ZeRO stage 0-3), global-norm clipping, a learning rate from the schedule, and an
// AdamW or LAMB update of this rank's parameters. The trainer, `trillion bench step` and the
// tests all step through this one function, so what is benchmarked is what trains.
//
// train.micro_batch is the global micro-batch; this rank runs micro_batch / dp sequences of it.
// With one process (no dp group given) the step is exactly the one-process algorithm.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "comm/communicator.h"
#include "model/transformer.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "parallel/data.h"
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
  // Initial parameters, identical for every layout.
  void init_parameters(uint64_t seed) { parallel_.init_parameters(seed); }

  Transformer& model() { return model_; }
  Optimizer& optimizer() { return *optimizer_; }
  parallel::DataParallel& data_parallel() { return parallel_; }
  const LrSchedule& schedule() const { return schedule_; }
  int64_t tokens_per_step() const;  // global
  int64_t local_micro_batch() const { return config_.train.micro_batch / dp_.size(); }

 private:
  RunConfig config_;
  Backend& be_;
  std::unique_ptr<comm::Communicator> local_;  // the group of one when no dp group is given
  comm::Communicator& dp_;
  Transformer model_;
  parallel::DataParallel parallel_;
  std::unique_ptr<Optimizer> optimizer_;
  LrSchedule schedule_;
  std::vector<int32_t> tokens_, targets_;
};

}  // namespace trillion
