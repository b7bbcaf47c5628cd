// Checkpoints of a running job: write one from the runner's (possibly sharded) state, and resume
// from the newest valid one. Sharded state is gathered into the one-process table layout, so any
// layout resumes any checkpoint; a corrupt checkpoint is reported in events.log and the previous
// one used (train/checkpoint.h holds the file format and its checks).
#pragma once

#include <cstdint>
#include <string>

#include "train/run_directory.h"
#include "train/step_runner.h"

namespace trillion {

// Collective over the dp group; only the lead rank writes. Keeps config.train.keep_checkpoints.
void save_checkpoint(RunDirectory& dir, StepRunner& runner, MemoryTracker& tracker,
                     const RunConfig& config, const std::string& config_toml, int64_t step,
                     uint64_t next_sample);

// Loads the newest valid checkpoint into the runner and returns its step; 0 when the run has
// none. Throws Error when checkpoints exist but every one is corrupt.
int64_t resume_from_checkpoint(RunDirectory& dir, StepRunner& runner, MemoryTracker& tracker,
                               const RunConfig& config);

}  // namespace trillion
