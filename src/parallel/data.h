// DataParallel: data parallelism over a dp communicator with ZeRO stage 0-3, driven by the
// model's unit hooks. One optimizer step (StepRunner) goes:
//   begin_step()                       zero this rank's gradients
//   per micro-batch: set_last_micro(); forward; backward   (hooks start bucket reductions)
//   finish_gradients()                 wait for the reductions still in flight
//   clip_gradients(max_norm)           global norm over all shards (one all-reduce of a double)
//   optimizer.step(optimizer_params(), optimizer_grads(), lr)  over segments()
//   finish_step()                      ZeRO-1/2: all-gather the updated parameters
//
// Stage 0: gradients all-reduced bucket by bucket, in place, started in backward as each bucket
//   completes (last micro-batch only: earlier micro-batches accumulate locally). Every rank
//   updates all parameters with full optimizer state.
// Stage 1: buckets reduce-scattered instead; each rank updates its shard with 1/n of the
//   optimizer state, then parameters are all-gathered.
// Stage 2: gradients live in per-bucket buffers (zero.h GradientShards) that exist only from the
//   bucket's first backward unit until its reduce-scatter starts, accumulated into a 1/n
//   gradient shard (every micro-batch is reduced).
// Stage 3: parameters sharded too (zero.h ParameterShards): each unit is all-gathered before its
//   forward and again before its backward, released after, the next unit prefetched.
// Per rank per step with accumulation 1, bytes sent = 2 P (n-1)/n elements for stages 0-2 and
// 3 P (n-1)/n for stage 3, plus a few doubles (loss, norms) — what the tests assert.
//
// The loss is the gradient of the mean over the global batch: each rank scales its micro-batch
// gradient by 1 / (global tokens), and the reduction sums over ranks.
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "optim/optimizer.h"
#include "parallel/buckets.h"
#include "parallel/zero.h"

namespace trillion::parallel {

struct DataParallelOptions {
  int stage = 0;                // ZeRO stage 0-3
  int64_t bucket_elements = 0;  // stages 0-2; stage 3 always reduces and gathers per unit
  bool overlap = true;          // false: wait for each bucket as soon as it starts (to measure)
};

class DataParallel : public UnitHooks {
 public:
  // What the model must allocate itself under `stage`.
  static ModelStorage model_storage(int stage);

  // The model must be built with model_storage(options.stage); hooks are installed here.
  DataParallel(Transformer& model, comm::Communicator& dp, Backend& backend, MemoryTracker& tracker,
               const DataParallelOptions& options);
  ~DataParallel() override;
  int stage() const { return options_.stage; }
  const BucketPlan& plan() const { return plan_; }
  comm::Communicator& group() { return dp_; }

  // The same initial values as one process (Philox keyed by tensor and element, not by rank).
  void init_parameters(uint64_t seed);
  // Full table-layout copies for checkpoints (every rank gets them), and loading them back.
  void gather_parameters(const Buffer& full);
  void load_parameters(const Buffer& full);
  void gather_state(const Buffer& state, const Buffer& full);
  void load_state(const Buffer& full, const Buffer& state);

  // What the optimizer updates.
  const Buffer& optimizer_params();
  const Buffer& optimizer_grads();
  const std::vector<OptimSegment>& segments() const { return segments_; }
  int64_t state_elements() const;
  SumAcrossRanks sum_across_ranks();

  void begin_step();
  void set_last_micro(bool last) { last_micro_ = last; }
  void finish_gradients();
  // Returns the global gradient norm before clipping; scales this rank's gradients if above max.
  double clip_gradients(double max_norm);
  void finish_step();
  double mean_across_ranks(double value);
  // Seconds finish_gradients() spent waiting in the last step: reduction time not hidden behind
  // backward.
  double exposed_wait_seconds() const { return wait_seconds_; }

  void before_forward(int unit) override;
  void after_forward(int unit) override;
  void before_backward(int unit) override;
  void after_backward(int unit) override;

 private:
  struct InFlight {
    int bucket = 0;
    comm::Handle handle;
    Buffer input, output;  // padded bucket gradients (stages 2-3, or 1 when padded), chunk result
  };
  void start_reduction(int bucket);
  void complete(InFlight& f);
  void poll();

  Transformer& model_;
  comm::Communicator& dp_;
  Backend& be_;
  MemoryTracker& tracker_;
  DataParallelOptions options_;
  BucketPlan plan_;
  std::vector<OwnedPiece> pieces_;
  std::vector<OptimSegment> segments_;
  std::unique_ptr<GradientShards> grads_;    // stages 2-3
  std::unique_ptr<ParameterShards> params_;  // stage 3
  std::vector<InFlight> in_flight_;
  bool last_micro_ = true;
  double wait_seconds_ = 0;
};

}  // namespace trillion::parallel
