// Trainer: runs a configured training job in a run directory — config.toml (resolved),
// metrics.jsonl (one JSON object per step), events.log, summary.json, checkpoints/ — and resumes
// one bitwise: model, optimizer moments, step and data position come back from the newest valid
// checkpoint, so an interrupted run continues exactly as if it had never stopped.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "train/run_config.h"

namespace trillion {

struct TrainOptions {
  std::string run_dir;
  bool resume = false;
  int64_t stop_after_step = 0;  // > 0: checkpoint and stop once this step completes
  double max_minutes = 0;       // > 0: checkpoint and stop when the time budget is spent
  bool quiet = false;           // no progress output
  bool allow_oversubscribe_memory = false;  // skip the early memory check (train/memory_check.h)
};

// Set (by a signal handler) to ask the trainer to checkpoint and stop after the current step.
extern std::atomic<bool> g_stop_requested;

// Returns the summary JSON text that was written to summary.json.
std::string train(const RunConfig& config, const TrainOptions& options);

}  // namespace trillion
