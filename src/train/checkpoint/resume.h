// Checkpoints of a running job: resume from the newest valid one (writing them is
// train/checkpoint/writer.h: a multi-rank job writes a sharded checkpoint, every rank the runs of
// the one-process layout it owns; a one-process job, and a DiLoCo job whose islands hold different
// weights, the full form). Resuming, each rank reads from either
// form only the global ranges its own layout holds, so any layout resumes any checkpoint; a
// corrupt checkpoint is reported in events.log and the previous one used
// (train/checkpoint/checkpoint.h holds the file formats and their checks). The rest of a run's
// state (DiLoCo's outer state, the noise-scale averages) travels as CheckpointParts, each its own
// files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/checkpoint/checkpoint.h"
#include "train/run_directory.h"
#include "train/step_runner.h"

namespace trillion {

// State beyond the runner's that a checkpoint carries.
class CheckpointPart {
 public:
  virtual ~CheckpointPart() = default;
  // Collective over the world (every rank calls it); the lead rank's files are written.
  virtual void save(std::vector<CheckpointFile>& files) = 0;
  // Every rank, after the runner's state was loaded from the verified `checkpoint_dir`.
  virtual void load(const std::string& checkpoint_dir) = 0;
};

// XXH64 of the one-process tensor table's names and global shapes: what makes a sharded
// checkpoint's ranges mean the same tensors.
uint64_t model_fingerprint(const TensorTable& global_table);

// Loads the newest valid checkpoint (of a step <= max_step) into the runner and the parts and
// returns its state (step, next data sample, ...); all zeros when the run has none (a rollback
// with nothing to go back to). Throws Error when checkpoints exist but every one is corrupt.
CheckpointState resume_from_checkpoint(RunDirectory& dir, StepRunner& runner,
                                       MemoryTracker& tracker, const RunConfig& config,
                                       const std::vector<CheckpointPart*>& parts = {},
                                       int64_t max_step = INT64_MAX);

// `train --resume`: as resume_from_checkpoint, but a run directory without a checkpoint whose
// metrics.jsonl already logs steps is refused before anything in it changes (starting at step 0
// would cut those lines): the Error names what checkpoints/ holds and how to start over. A
// directory that logs no step yet (new, or a run that failed before its first step) starts at
// step 0, so scripts may pass --resume always. A restart by `trillion launch`'s supervisor
// (TRILLION_SUPERVISED_RESTART=1: it restarts failed jobs with --resume, possibly before their
// first checkpoint) of a run without a checkpoint also starts over at step 0, as a restart must.
CheckpointState resume_run(RunDirectory& dir, StepRunner& runner, MemoryTracker& tracker,
                           const RunConfig& config, const std::vector<CheckpointPart*>& parts);

}  // namespace trillion
