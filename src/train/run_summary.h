// summary.json of a training run (train/trainer.h) and the measurements only its end takes:
// every rank's memory beside plan/'s prediction, context parallelism's balance, the last step's
// pipeline timeline (trace.json). Invariants: the *_json functions that take a TrainingJob are
// collective over its world (every rank calls them, in the order TrainingLoop::finish does);
// summary_json only assembles, and writes JSON null for a loss that is NaN.
#pragma once

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "train/training_job.h"

namespace trillion {

// What the step loop counted.
struct RunTotals {
  int64_t steps = 0;      // the last step done
  bool completed = true;  // false: stopped early
  int64_t skipped_updates = 0, rollbacks = 0;
  double final_train_loss = std::nan(""), final_val_loss = std::nan("");
  int64_t steps_run = 0;  // by this process (after a resume, since it)
  double train_seconds = 0;
};

// memory_per_rank: measured, with plan/'s activation and ring-buffer bytes of this rank's stages.
nlohmann::json measured_memory_per_rank(TrainingJob& job);
// Context parallelism: each rank's counted causal attention FLOPs and the cp groups' balance
// (null with cp = 1).
nlohmann::json context_balance_json(TrainingJob& job);
// Multi-stage runs: the last step's measured timeline, written to trace.json by the lead rank,
// and its summary (null with one stage or no step run).
nlohmann::json pipeline_timeline_json(TrainingJob& job, int64_t steps_run);

// A mixture's sources (data.sources) after `steps` steps: per source its path, weight, training
// tokens read so far and epochs of it (tokens over its tokens in whole samples); null without
// data.sources. Pure (no communication): every rank computes the same from the sample index.
nlohmann::json data_sources_json(const TrainingJob& job, int64_t steps);

nlohmann::json summary_json(const TrainingJob& job, const RunTotals& totals,
                            const nlohmann::json& per_rank, const nlohmann::json& checkpoints,
                            const nlohmann::json& context_balance, const nlohmann::json& pipeline);

}  // namespace trillion
