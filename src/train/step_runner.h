// StepRunner: one optimizer step of a run = grad_accum micro-batches of forward + backward,
// global-norm clipping, a learning rate from the schedule, and an AdamW update. The trainer,
// `trillion bench step` and the tests all step through this one function, so what is benchmarked
// is what trains.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "model/transformer.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "train/run_config.h"

namespace trillion {

struct StepStats {
  double loss = 0;       // mean over the step's tokens
  double lr = 0;
  double grad_norm = 0;  // before clipping
  int64_t tokens = 0;
  double seconds = 0;
};

// Fills tokens and targets ([B*T] each) for micro-batch `micro` of step `step`.
using BatchSource = std::function<void(int64_t step, int64_t micro, int32_t* tokens,
                                       int32_t* targets)>;

class StepRunner {
 public:
  StepRunner(const RunConfig& config, Backend& backend, MemoryTracker& tracker);

  StepStats step(int64_t step_index, const BatchSource& batches);

  Transformer& model() { return model_; }
  AdamW& optimizer() { return optimizer_; }
  const LrSchedule& schedule() const { return schedule_; }
  int64_t tokens_per_step() const;

 private:
  RunConfig config_;
  Backend& be_;
  Transformer model_;
  AdamW optimizer_;
  LrSchedule schedule_;
  std::vector<int32_t> tokens_, targets_;
};

}  // namespace trillion
