// TiedEmbedding: tied input embedding and output head under pipeline parallelism, when the first
// stage (the embedding lookup) and the last stage (the head) live on different pipeline ranks
// (every schedule but DualPipe, whose ranks hold both ends). Megatron's way: the last stage keeps
// a copy of the embedding table, the head's gradient of it is added to the first stage's, and the
// first stage's updated table is copied back after every update.
//
// Per step, between the two ends of one pipeline (same dp, cp and tp coordinates):
//   last stage, after the head's last gradient-writing pass of the step: the copy's gradient (the
//     head's contribution, every micro-batch summed) is sent to the first stage from a staging
//     buffer (non-blocking: the last rank may still owe other stages their backward passes), and
//     the copy's gradient is zeroed, so the data-parallel reduction, the global norm and the
//     copy's own update see nothing of it;
//   first stage, after the embedding's last gradient-writing pass of the step and before data
//     parallelism reduces it (this hook runs before DataParallel's in the unit-hook chain): the
//     head's contribution is received and added to the embedding's gradient;
//   after the update (ZeRO-0/1: every rank holds the whole table again): the first stage sends the
//     table, the last stage overwrites its copy with it.
// Under ZeRO-2/3 (`sharded`) the table's gradient lives in dp shards, reduced every micro-batch,
// and under ZeRO-3 its parameters too; a precision recipe's store keeps the weights as an fp32
// master (sharded from ZeRO-1 on) that it rounds to the bf16 copy the layers read: in both cases
// the exchange runs chunk-wise, where the optimizer updates, instead. Both ends give the
// table a ZeRO bucket of its own (DataParallelOptions::tied_unit), so dp rank r of either end owns
// the same chunk r of it; the copy's gradient is reduce-scattered over the last stage's dp group
// like any other (the head's borrowing passes complete it). After both ends' reductions the last
// stage sends its chunk of the gradient to the first, which adds it, and zeroes its own; after the
// update the first stage's updated chunk overwrites the copy's, before ZeRO-2 all-gathers the
// parameters (and before a recipe's store rounds and gathers its master) (ZeRO-3 gathers the copy
// from its shard when the head reads it, as any unit). Invariants: the copy equals the first
// stage's table bitwise before every forward pass; only the first stage's table is the model's
// (checkpoints gather it from there); 2 x V/tp x C elements cross the pipeline group per step, 2 x
// V/tp x C / dp per dp rank under ZeRO-2/3 (plan::tied_embedding_elements).
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "core/memory.h"
#include "model/parameters.h"
#include "parallel/data.h"

namespace trillion::parallel {

class TiedEmbedding : public UnitHooks {
 public:
  enum class End { first, last };
  // unit: the local unit whose passes complete the gradient (the embedding's on the first stage,
  // the head's on the last); passes: its gradient-writing passes per step; peer: the other end's
  // rank in `pp`. Registers itself in params' hook chain (construct it after DataParallel).
  // sharded: the ZeRO-2/3 (or recipe-store) instance holding the table (its tied_unit set), or
  // nullptr.
  TiedEmbedding(End end, ParameterSet& params, comm::Communicator& pp, int peer, int unit,
                int64_t passes, Backend& backend, MemoryTracker& tracker,
                DataParallel* sharded = nullptr);
  ~TiedEmbedding() override;
  TiedEmbedding(const TiedEmbedding&) = delete;
  TiedEmbedding& operator=(const TiedEmbedding&) = delete;

  End end() const { return end_; }
  bool sharded() const { return sharded_ != nullptr; }
  void after(int unit, Pass pass, Use use) override;
  // Waits for the gradient still travelling (last stage), or, sharded, sums the two ends' chunks
  // (after the dp reductions finished); call before the gradients are read.
  void finish_gradients();
  // After the update: the copy := the first stage's table (sharded: its chunk, before the
  // parameters are gathered). Collective over the two ends.
  void copy_weights();
  // Test hook (TRILLION_CHECK_TIED_COPY=1): after a step, whether the copy equals the first
  // stage's table bitwise (the whole table, or under ZeRO-3 this rank's chunk, which is what a
  // gather assembles), over `group` (the two ends in a group of their own, so the step's counters
  // do not see it). The last stage answers "" or what differs; the first stage answers "".
  std::string check_copy(comm::Communicator& group, int peer);

 private:
  End end_;
  ParameterSet& params_;
  comm::Communicator& pp_;
  int peer_, unit_;
  int64_t passes_, finished_ = 0;
  Backend& be_;
  DataParallel* sharded_;
  std::vector<OptimSegment> pieces_;  // sharded: this rank's chunk of the table (its segments)
  Buffer staging_;  // the gradient on its way (last stage) or arriving (first stage)
  comm::Handle sending_;
};

}  // namespace trillion::parallel
