// Checkpoints: RUN_DIR/checkpoints/step_NNNNNNNN/ holds params.bin (the flat parameter buffer),
// optimizer.bin (AdamW first then second moments, same layout), state.json (step, optimizer
// step count, next data sample index, seed) and config.toml, plus the extra files of the run's
// other state (DiLoCo's outer state, the noise-scale averages: train/resume.h CheckpointPart),
// plus manifest.json with the size and XXH64 of every file. Invariants: a checkpoint directory
// appears only complete (written as .tmp-step_N, files fsynced, then renamed, then the parent
// fsynced); a checkpoint whose manifest or any checksum does not match is reported and skipped,
// never loaded.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/memory.h"

namespace trillion {

struct CheckpointState {
  int64_t step = 0;             // optimizer steps completed
  int64_t optimizer_steps = 0;  // AdamW's bias-correction counter
  uint64_t next_sample = 0;     // global index of the next training sample
  uint64_t seed = 0;
};

// A file beside the standard ones (a plain name, no directories).
struct CheckpointFile {
  std::string name;
  std::string bytes;
};

struct CheckpointContents {
  const Buffer* params = nullptr;
  const Buffer* first_moment = nullptr;
  const Buffer* second_moment = nullptr;
  CheckpointState state;
  std::string config_toml;
  std::vector<CheckpointFile> extra;
};

// Writes checkpoint `state.step` under run_dir/checkpoints and deletes all but the newest
// `keep` complete checkpoints. Returns the checkpoint directory.
std::string write_checkpoint(const std::string& run_dir, const CheckpointContents& c, int64_t keep);

// Complete checkpoint directories of a run, newest first (by step).
std::vector<std::string> list_checkpoints(const std::string& run_dir);

// Verifies manifest and checksums of `dir`; on success returns nullopt, else the reason.
std::optional<std::string> verify_checkpoint(const std::string& dir);

// Loads a verified checkpoint into the given buffers (sizes must match exactly; a mismatch
// means the checkpoint is of another model and is an Error naming both sizes).
CheckpointState load_checkpoint(const std::string& dir, Buffer& params, Buffer* first_moment,
                                Buffer* second_moment);

// The bytes of an extra file of a verified checkpoint, or nullopt when it has none of that name.
std::optional<std::string> read_checkpoint_file(const std::string& dir, const std::string& name);

// Reads only the resolved config.toml of a checkpoint.
std::string read_checkpoint_config(const std::string& dir);

}  // namespace trillion
