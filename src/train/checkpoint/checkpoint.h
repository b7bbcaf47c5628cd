// Checkpoints: RUN_DIR/checkpoints/step_NNNNNNNN/ holds state.json (step, optimizer step count,
// next data sample index, seed, element size), config.toml, the extra files of the run's other
// state (DiLoCo's outer state, the noise-scale averages: train/checkpoint/resume.h CheckpointPart),
// the model's parameters and AdamW moments, and manifest.json (written last) with the size and
// XXH64 of every file. The model state comes in one of two forms:
// - full (one-process runs, `trillion import`): params.bin, the flat one-process parameter buffer,
//   and optimizer.bin, the first then the second moments in the same layout;
// - sharded (multi-rank runs): each rank writes only what it owns, params_rNNNNN.bin (its runs of
//   the one-process layout back to back) and optimizer_rNNNNN.bin (their first moments, then
//   their second), and layout.json says which global runs each file holds, the layout that wrote
//   it and a fingerprint of the model's tensor table. The runs of all shards cover every element
//   exactly once (checked when written and when read), so any layout reads the ranges it needs.
// Invariants: a checkpoint directory appears only complete (written as .tmp-step_N, files
// fsynced, then renamed, then the parent fsynced; a failed write removes its .tmp-step_N, and the
// next write removes any a killed process left); a checkpoint whose manifest, any size or
// checksum, any field of state.json or layout.json does not check is reported and skipped, never
// loaded. Every size and field read from these files is checked before use: no crafted
// checkpoint reaches a JSON library exception or assertion, or reads past a file.
// Names: only a directory named exactly step_name(N) ("step_%08d": step_00000020, and more digits
// past 99999999) is a checkpoint of step N; anything else under checkpoints/ (step_00000010.bak,
// step_abc, a user's files) is never listed, loaded, counted or deleted.
// Retention (checkpoint.keep = K), after step S was sealed: only directories of steps below S
// that pass a completeness check (manifest, every file at its manifest size, state.json's step
// the name's) count; the newest K - 1 of them stay, older ones are deleted. Step S itself is
// never deleted; directories of steps above S (a diverged trajectory a rollback left, a user's
// copy) are neither counted nor deleted; a step directory that is not a valid checkpoint (empty,
// truncated) is left where it is and reported through the `note` callback (events.log), never
// counted as kept. A checkpoint a reader has pinned (PinnedCheckpoint: generate, export,
// compare) is not deleted while pinned: the next checkpoint's retention removes it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/memory.h"

namespace trillion {

struct CheckpointState {
  int64_t step = 0;             // optimizer steps completed
  int64_t optimizer_steps = 0;  // AdamW's bias-correction counter
  uint64_t next_sample = 0;     // global index of the next training sample
  uint64_t seed = 0;
  bool loaded = false;  // read from a checkpoint (a step-0 one too: an imported model)
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

// What retention has to say (a step directory it leaves because it is not a valid checkpoint,
// or because a reader holds it). Empty: printed on stderr.
using CheckpointNote = std::function<void(const std::string&)>;

// Writes checkpoint `state.step` under run_dir/checkpoints, then applies retention (see above):
// `keep` valid checkpoints in all, this one included. Returns the checkpoint directory.
std::string write_checkpoint(const std::string& run_dir, const CheckpointContents& c, int64_t keep,
                             const CheckpointNote& note = {});

// The step of a checkpoint directory's name: N for exactly step_name(N) ("step_00000020"), else
// nullopt ("step_00000010.bak", "step_abc", "step_20", a step past 18 digits).
std::optional<int64_t> checkpoint_step_of(std::string_view name);

// Checkpoint directories of a run (names exactly step_N; not yet verified), newest first by step.
std::vector<std::string> list_checkpoints(const std::string& run_dir);

// A checkpoint a reader holds: a shared flock(2) on its directory, which retention never deletes
// while it is held. Unlocked when destroyed. Readers that read a checkpoint of a live run
// (generate, export, compare) hold one from before they verify it until they are done.
class PinnedCheckpoint {
 public:
  PinnedCheckpoint(std::string dir, int fd) : dir_(std::move(dir)), fd_(fd) {}
  PinnedCheckpoint(PinnedCheckpoint&& o) noexcept : dir_(std::move(o.dir_)), fd_(o.fd_) {
    o.fd_ = -1;
  }
  PinnedCheckpoint& operator=(PinnedCheckpoint&& o) noexcept;
  PinnedCheckpoint(const PinnedCheckpoint&) = delete;
  PinnedCheckpoint& operator=(const PinnedCheckpoint&) = delete;
  ~PinnedCheckpoint();
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  int fd_ = -1;
};
// Pins `dir`; nullopt when it no longer exists (retention removed it meanwhile).
std::optional<PinnedCheckpoint> pin_checkpoint(const std::string& dir);
// The newest checkpoint of `run_dir` (of step `step` when >= 0) that verifies, pinned; nullopt
// when there is none. Each newer one that does not verify is passed to on_corrupt(dir, problem)
// once; one that retention removed between the listing and the pin is skipped without a word
// (it is not corrupt) and the run directory listed again.
std::optional<PinnedCheckpoint> pin_newest_checkpoint(
    const std::string& run_dir, int64_t step,
    const std::function<void(const std::string&, const std::string&)>& on_corrupt = {});

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

// ---- sharded checkpoints: three phases over the ranks of a job ----

// One run of the one-process layout a rank writes, in place in its buffers (a null moment is
// written as zeros: optimizers without that moment).
struct ShardRun {
  int64_t global = 0, length = 0;
  const void* params = nullptr;
  const void* first_moment = nullptr;
  const void* second_moment = nullptr;
};

// Memory the state files' bytes pass through on their way to disk. Empty: they go straight from
// the runs' memory (an async checkpoint's host snapshot). Else every piece is copied into it
// first: the staging a device-resident state needs, and all a synchronous write holds beyond the
// rank's own state (so its extra memory is this buffer, whatever the shard's size).
struct WriteBuffer {
  char* data = nullptr;
  size_t bytes = 0;
};

// Lead rank, first: removes stale temporaries and creates the step's temporary directory.
std::string begin_sharded_checkpoint(const std::string& run_dir, int64_t step);
// Every rank, after begin: writes its shard files and its index into `tmp`, streamed from the
// runs' memory through `stage` (nothing is gathered). Safe on a thread of its own: it touches
// only the runs' memory, `stage` and files.
void write_checkpoint_shard(const std::string& tmp, int rank, const std::vector<ShardRun>& runs,
                            int dtype_bytes, WriteBuffer stage = {});
// One-process runs, streamed the same way: the full form's params.bin and optimizer.bin from runs
// that tile the model (sorted here by global offset), and an index for commit_full_checkpoint.
void write_full_state(const std::string& tmp, std::vector<ShardRun> runs, int64_t elements,
                      int dtype_bytes, WriteBuffer stage = {});
// After write_full_state: state.json, config.toml and c.extra, manifest.json last, rename, keep.
std::string commit_full_checkpoint(const std::string& run_dir, const std::string& tmp,
                                   const CheckpointContents& c, int dtype_bytes, int64_t keep,
                                   const CheckpointNote& note = {});
// What layout.json records beyond the shards.
struct ShardedLayout {
  int world = 1;
  int64_t elements = 0;  // the one-process parameter count
  int dtype_bytes = 4;
  uint64_t model_fingerprint = 0;         // of the tensor table: names and global shapes
  std::map<std::string, int64_t> writer;  // dp, zero, tp, pp, ep, cp of the run that wrote it
};
// Lead rank, after every rank's write: checks the shards cover every element exactly once, writes
// layout.json, state.json, config.toml and c.extra, manifest.json last, renames, keeps `keep`
// (retention as above).
// c.params and the moments are unused. Returns the checkpoint directory.
std::string commit_sharded_checkpoint(const std::string& run_dir, const std::string& tmp,
                                      const ShardedLayout& layout, const CheckpointContents& c,
                                      int64_t keep, const CheckpointNote& note = {});
// Removes a temporary directory whose checkpoint will not be completed.
void abandon_checkpoint(const std::string& tmp);

// Reads ranges of the model state of a verified checkpoint, full or sharded alike.
class CheckpointReader {
 public:
  enum class Part { params, first_moment, second_moment };
  // Throws Error naming the checkpoint and the problem (a layout that does not check).
  explicit CheckpointReader(const std::string& dir);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;
  const CheckpointState& state() const { return state_; }
  int dtype_bytes() const { return dtype_bytes_; }
  int64_t elements() const { return elements_; }
  // Sharded checkpoints record one; full ones do not.
  std::optional<uint64_t> model_fingerprint() const { return fingerprint_; }
  // dest <- elements [global, global + n) of `part` (dtype_bytes() each).
  void read(Part part, int64_t global, int64_t n, void* dest) const;

 private:
  struct Segment {
    int64_t global = 0, length = 0;
    int params_file = 0, optimizer_file = 0;
    int64_t params_at = 0, first_at = 0, second_at = 0;  // elements into the files
  };
  std::string dir_;
  CheckpointState state_;
  int dtype_bytes_ = 4;
  int64_t elements_ = 0;
  std::optional<uint64_t> fingerprint_;
  std::vector<Segment> segments_;  // sorted by global, covering [0, elements_) once
  std::vector<std::string> files_;
  mutable std::vector<int> fds_;  // opened on first use
};

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
