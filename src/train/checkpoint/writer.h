// The checkpoints of a running job, synchronous or asynchronous ([checkpoint] async), in the
// formats of train/checkpoint/checkpoint.h. Every rank writes what it owns
// (StepRunner::owned_runs); the lead rank commits (layout, state, config, manifest last, rename).
// - Sync: the owned runs are streamed to disk through one write buffer of
//   checkpoint.write_buffer_mb (capped at one owned part), and the lead commits at once; training
//   waits for all of it. Extra memory: the buffer.
// - Async: the owned runs are copied into a host snapshot (parameters and moments: exactly the
//   rank's shard) and a thread writes them from there while training goes on. Rank 0 learns that
//   every rank's files are durable from a one-number all-reduce at the end of each later step
//   (poll); only then does it commit, so the checkpoint does not exist before its manifest. One
//   checkpoint is in flight: the next one, a rollback and the end of the run wait for it (drain).
//   Extra memory: the snapshot.
// A failure of any rank's write (disk full, ...) ends every rank with the lowest failing rank's
// one-line message (path and cause, sent over the communicator: nothing needs the full disk),
// the same as the sync path, wherever it is found; the step's temporary directory is removed and
// the checkpoints before it stay.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "core/memory.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/resume.h"
#include "train/run_config.h"
#include "train/run_directory.h"
#include "train/step_runner.h"

namespace trillion {

// What checkpoints cost this rank, for summary.json.
struct CheckpointCosts {
  int64_t written = 0;            // committed checkpoints
  double blocked_seconds = 0;     // training stood still: snapshot or write, commit, waits
  double wait_seconds = 0;        // of which: waiting for the previous async write to finish
  int64_t waits = 0;              // checkpoints (or drains) that found a write still running
  double background_seconds = 0;  // async: the writer thread's time, while training ran
  double snapshot_seconds = 0;    // async: copying the shard into the snapshot
  double commit_seconds = 0;      // the lead's layout, small files, manifest, rename, retention
  double extra_bytes = 0;         // most tracked bytes held beyond the rank's state, per checkpoint
};

class CheckpointWriter {
 public:
  // `world` spans the job; `on_commit(step, dir)` runs on the lead rank once a checkpoint exists.
  CheckpointWriter(RunDirectory& dir, StepRunner& runner, MemoryTracker& tracker,
                   const RunConfig& config, const std::string& config_toml,
                   comm::Communicator& world,
                   std::function<void(int64_t, const std::string&)> on_commit = {});
  // A write still running is joined, never committed (its temporary directory stays until the
  // next checkpoint of the run removes it).
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Collective. Writes checkpoint `step` (sync) or starts it (async), after waiting for the one
  // in flight. Throws the job's one-line Error when a rank's write failed.
  void save(int64_t step, uint64_t next_sample, const std::vector<CheckpointPart*>& parts);
  // Collective, after every step: commits the checkpoint in flight once every rank's files are
  // durable. `step` is the step just finished (for events.log).
  void poll(int64_t step);
  // Collective: waits for the checkpoint in flight and commits it.
  void drain();
  bool in_flight() const { return pending_ != nullptr; }
  const CheckpointCosts& costs() const { return costs_; }
  // Collective: summary.json's `checkpoints` (times of the slowest rank, the extra bytes measured
  // per rank beside the memory plan's: `planned_extra_bytes` for the busiest rank, and
  // checkpoint_extra_bytes of each rank's owned elements).
  nlohmann::json summary(double step_seconds, double planned_extra_bytes);

 private:
  struct Pending;
  std::vector<ShardRun> owned_runs(int64_t* elements);
  void write_now(int64_t step, CheckpointContents& c);  // sync, and the DiLoCo gather
  void start(int64_t step, CheckpointContents c);       // async
  void finish(int64_t after_step);
  // Collective: the lead writes layout (sharded), state, config, extras, manifest, and renames.
  std::string commit(int64_t step, const std::string& tmp, bool full, const CheckpointContents& c);
  void committed(int64_t step, const std::string& where, const std::string& how);
  // Collective: runs `f` on every rank; if it threw on any, every rank throws the lowest failing
  // rank's message (and the lead removes the step's temporary directory).
  void agree(int64_t step, const std::string& tmp, const std::function<void()>& f);
  void agree_on(int64_t step, const std::string& tmp, std::string problem);
  // Retention's notes go to events.log, each once.
  CheckpointNote note();

  RunDirectory& dir_;
  StepRunner& runner_;
  MemoryTracker& tracker_;
  const RunConfig& config_;
  const std::string& config_toml_;
  comm::Communicator& world_;
  std::function<void(int64_t, const std::string&)> on_commit_;
  int dtype_bytes_;
  std::unique_ptr<Pending> pending_;
  CheckpointCosts costs_;
  std::set<std::string> noted_;
};

}  // namespace trillion
