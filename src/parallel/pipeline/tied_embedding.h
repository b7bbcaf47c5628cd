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
// Invariants: the copy equals the first stage's table bitwise before every forward pass; only the
// first stage's table is the model's (checkpoints gather it from there); 2 x V/tp x C elements
// cross the pipeline group per step.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "core/memory.h"
#include "model/parameters.h"

namespace trillion::parallel {

class TiedEmbedding : public UnitHooks {
 public:
  enum class End { first, last };
  // unit: the local unit whose passes complete the gradient (the embedding's on the first stage,
  // the head's on the last); passes: its gradient-writing passes per step; peer: the other end's
  // rank in `pp`. Registers itself in params' hook chain (construct it after DataParallel).
  TiedEmbedding(End end, ParameterSet& params, comm::Communicator& pp, int peer, int unit,
                int64_t passes, Backend& backend, MemoryTracker& tracker);
  ~TiedEmbedding() override;
  TiedEmbedding(const TiedEmbedding&) = delete;
  TiedEmbedding& operator=(const TiedEmbedding&) = delete;

  End end() const { return end_; }
  void after(int unit, Pass pass, Use use) override;
  // Waits for the gradient still travelling (last stage); call before the gradients are read.
  void finish_gradients();
  // After the update: the copy := the first stage's table. Collective over the two ends.
  void copy_weights();

 private:
  End end_;
  ParameterSet& params_;
  comm::Communicator& pp_;
  int peer_, unit_;
  int64_t passes_, finished_ = 0;
  Backend& be_;
  Buffer staging_;  // the gradient on its way (last stage) or arriving (first stage)
  comm::Handle sending_;
};

}  // namespace trillion::parallel
