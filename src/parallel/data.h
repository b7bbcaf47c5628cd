// DataParallel: data parallelism over a dp communicator, driven by the unit hooks of the rank's
// ParameterSet (model/unit_hooks.h). It owns the bucketed, overlapped gradient reduction; the
// ZeRO stage only chooses its stores (zero.h). One optimizer step (StepRunner) goes:
//   begin_step()                       zero this rank's gradients
//   micro-batches: forward and backward passes of the stages (hooks start bucket reductions)
//   finish_gradients()                 wait for the reductions still in flight
//   gradient_sum_squares()             this rank's part of the global norm (over the dp shards;
//                                      the step runner adds the other stages) and, if above the
//   scale_gradients(max / norm)        clip, scaling
//   optimizer.step(optimizer_params(), optimizer_grads(), lr)  over segments()
//   finish_step()                      ZeRO-1/2: all-gather the updated parameters
//
// A bucket is reduced as soon as every unit in it has finished its backward (or backward_weight)
// pass of the micro-batch that completes it: the last of the step when gradients accumulate in
// the model's buffer (stages 0-1), every micro-batch when they live in temporary bucket buffers
// (stages 2-3). Counting finished passes per unit, rather than trusting a pass order, is what
// makes it work under any schedule, including zero-bubble ones that defer W passes.
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
  int64_t micro_batches = 1;    // backward passes per unit per step (gradient accumulation)
  // Per local unit, when units differ (DualPipe: each model copy's stages see half the
  // micro-batches); empty: micro_batches for every unit.
  std::vector<int64_t> passes_per_unit;
  // The part of each local unit this instance reduces (empty: every unit whole). Expert
  // parallelism runs two instances over one ParameterSet: the dense tensors over the dp group and
  // the routed experts over the expert-data-parallel group. Each range must be contiguous.
  std::vector<UnitRange> ranges;
  // Where this instance's optimizer state starts in the optimizer's buffers (the second
  // instance of expert parallelism follows the first's).
  int64_t state_base = 0;
  // ZeRO-2/3 with two instances: the second one's sharded gradients (and ZeRO-3 parameters) live
  // at state_base in the first one's buffers (shard_host), which reserves shard_extra elements
  // after its own shard for them; one optimizer step then reads one buffer of each.
  class DataParallel* shard_host = nullptr;
  int64_t shard_extra = 0;
  // A precision recipe's fp32 master and bf16 compute copy, held and sharded by the store
  // (parallel/mixed_weights.h) instead of fp32 weights in the model's buffer.
  bool mixed_precision = false;
  // Gradients kept and reduced in bf16 (parallel/bf16_gradients.h); needs mixed_precision.
  bool bf16_gradients = false;
  // A tied embedding's unit on a pipeline end (parallel/pipeline/tied_embedding.h), under ZeRO-2/3:
  // a bucket of its own, so both ends shard the table alike. tied_copy: this rank holds it only as
  // the head's copy, whose borrowing passes (the head reading it) complete its gradients;
  // passes_per_unit must then count them.
  int tied_unit = -1;
  bool tied_copy = false;
};

// A run of table elements that this rank writes to a sharded checkpoint: its parameters at
// param_offset in optimizer_params(), its optimizer moments at state_offset.
struct CheckpointPiece {
  int spec = 0;
  int64_t table_offset = 0, param_offset = 0, state_offset = 0, length = 0;
};

class DataParallel : public UnitHooks {
 public:
  // What the model must allocate itself under `stage` (mixed_precision: no parameters at all).
  static ModelStorage model_storage(int stage, bool mixed_precision = false,
                                    bool bf16_gradients = false);

  // params must be built with model_storage(options.stage); the hooks are added to its chain.
  DataParallel(ParameterSet& params, comm::Communicator& dp, Backend& backend,
               MemoryTracker& tracker, const DataParallelOptions& options);
  ~DataParallel() override;
  int stage() const { return options_.stage; }
  const BucketPlan& plan() const { return plan_; }
  comm::Communicator& group() { return dp_; }

  // The same initial values as one process (Philox keyed by tensor and element, not by rank).
  void init_parameters(uint64_t seed) { params_store_->init(seed); }
  // Full table-layout copies for checkpoints (every rank gets them), and loading them back.
  void gather_parameters(const Buffer& full) { params_store_->gather_full(full); }
  void load_parameters(const Buffer& full) { params_store_->load_full(full); }
  // See ParameterStore::bf16_weights.
  const bf16* bf16_weights(const float* fp32, int64_t count) const {
    return params_store_->bf16_weights(fp32, count);
  }
  void gather_state(const Buffer& state, const Buffer& full);
  void load_state(const Buffer& full, const Buffer& state);
  // What this rank writes to a sharded checkpoint, held here without any gather: its owned chunks
  // under ZeRO >= 1 (disjoint over the dp group, together the whole of this instance's ranges);
  // under ZeRO-0 everything on dp rank 0 and nothing on the others.
  std::vector<CheckpointPiece> checkpoint_pieces() const;

  // What the optimizer updates.
  const Buffer& optimizer_params() { return params_store_->optimizer_params(); }
  const Buffer& optimizer_grads() { return grads_store_->optimizer_grads(); }
  const std::vector<OptimSegment>& segments() const { return segments_; }
  int64_t state_elements() const;
  // Where this instance's shard starts in optimizer_params() / optimizer_grads() when they are
  // sharded (0 unless it lives in a shard_host's buffers).
  int64_t shard_base() const { return options_.shard_host != nullptr ? options_.state_base : 0; }
  SumAcrossRanks sum_across_ranks();

  void begin_step();
  void finish_gradients();
  // The sum of squares of this stage's reduced gradients, each parameter counted once over the dp
  // group (one all-reduce of a double when they are sharded). After finish_gradients().
  double gradient_sum_squares();
  void scale_gradients(double factor) { grads_store_->scale(factor); }
  // Views of the reduced gradients this rank holds after finish_gradients(): the whole gradient
  // buffer (ZeRO-0) or this rank's owned chunk of each bucket (ZeRO-1). For summing copies of
  // the same parameters held by other stages (DualPipe's two model copies).
  std::vector<Tensor> reduced_gradients();
  void finish_step() { params_store_->finish_step(); }
  double mean_across_ranks(double value);
  // The gradient noise scale's small-batch estimates (optim/noise_scale.h): the sum of squares of
  // this rank's gradients before their reduction, over the estimates it made this step (one per
  // step when gradients accumulate in the model's buffer, ZeRO 0-1; one per micro-batch under
  // ZeRO 2-3), measured only when the dp group holds two or more estimates.
  double local_sum_squares() const { return local_sq_; }
  int64_t local_estimates() const {
    return grads_store_->reduces_every_micro_batch() ? options_.micro_batches : 1;
  }
  // Seconds finish_gradients() spent waiting in the last step: reduction time not hidden behind
  // backward.
  double exposed_wait_seconds() const { return wait_seconds_; }

  void before(int unit, Pass pass, Use use, int next) override;
  void after(int unit, Pass pass, Use use) override;

 private:
  void maybe_reduce(int bucket);
  bool covers(int64_t element) const;  // whether a table element is in this instance's ranges
  void start_reduction(int bucket);
  void poll();

  ParameterSet& params_;
  comm::Communicator& dp_;
  Backend& be_;
  MemoryTracker& tracker_;
  DataParallelOptions options_;
  BucketPlan plan_;
  std::unique_ptr<ParameterStore> params_store_;
  std::unique_ptr<GradientStore> grads_store_;
  std::vector<OptimSegment> segments_;
  int64_t state_elements_ = 0;  // stage 0
  std::vector<int64_t> expected_;  // per unit: backward passes per step
  std::vector<int64_t> finished_;  // per unit: backward passes finished this step
  std::vector<int64_t> reduced_;   // per bucket: micro-batches whose reduction has started
  std::vector<int64_t> folded_;    // per bucket: micro-batches every unit of it has finished
  std::vector<int64_t> needed_;    // per bucket: reductions per step (1, or every micro-batch)
  std::vector<Reduction> in_flight_;
  double wait_seconds_ = 0;
  double local_sq_ = 0;
};

}  // namespace trillion::parallel
