// Checkpoints: RUN_DIR/checkpoints/step_NNNNNNNN/ holds params.bin (the flat parameter buffer),
// optimizer.bin (AdamW first then second moments, same layout), state.json (step, optimizer
// step count, next data sample index, seed) and config.toml, plus the extra files of the run's other state
// (DiLoCo's outer state, the noise-scale averages: train/resume.h CheckpointPart), plus
// manifest.json with the size
// and XXH64 of every file. Invariants: a checkpoint directory appears only complete (written as
// .tmp-step_N, files fsynced, then renamed, then the parent fsynced; a failed write removes its
// .tmp-step_N, and the next write removes any a killed process left); a checkpoint whose
// manifest, any size or checksum, or any field of state.json does not check is reported and
// skipped, never loaded. Every size and field read from these files is checked before use: no
// crafted checkpoint reaches a JSON library exception or assertion, or reads past a file.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
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

// The final weights of a verified checkpoint as raw bytes, with their element size (4: f32,
// 8: f64, from state.json), for `trillion compare`.
struct CheckpointWeights {
  std::string bytes;
  int dtype_bytes = 4;
};
CheckpointWeights read_checkpoint_weights(const std::string& dir);

// The files of a checkpoint, each with its size and XXH64 as manifest.json records them.
struct ManifestEntry {
  uint64_t bytes = 0;
  uint64_t xxh64 = 0;
};
// Parses manifest.json text; every file a checkpoint holds must have an entry. Throws an Error
// naming `origin` and the field.
std::map<std::string, ManifestEntry> parse_checkpoint_manifest(std::string_view text,
                                                               const std::string& origin);
// Parses state.json text (step, optimizer_steps, next_sample, seed; dtype_bytes 4 or 8, 4 when
// absent). Throws an Error naming `origin` and the missing or mistyped field.
CheckpointState parse_checkpoint_state(std::string_view text, const std::string& origin,
                                       int* dtype_bytes = nullptr);

}  // namespace trillion
