// ZeRO (Rajbhandari et al. 1910.02054) as a choice of stores. A ZeRO stage is nothing but which
// parameter store and which gradient store data parallelism uses (make_parameter_store /
// make_gradient_store), and whether the optimizer state is sharded (stage >= 1):
//
//   stage   parameters               gradients                         optimizer state
//   0       replicated               replicated, all-reduced           full
//   1       replicated, refreshed    replicated, reduce-scattered      shard
//   2       replicated, refreshed    sharded (bucket buffers + shard)  shard
//   3       sharded (gather per use) sharded (bucket buffers + shard)  shard
//
// "refreshed": every rank updates only its owned pieces, then all-gathers the parameters.
// A precision recipe swaps in its own parameter store (fp32 master + bf16 copy, mixed_weights.h)
// and, with precision.grad_dtype = "bf16", its own gradient store (bf16_gradients.h).
// Shards follow a BucketPlan (buckets.h): rank r owns chunk r of every bucket. Helpers:
// gather_shards (all-gather every bucket's chunks into the full table layout) and take_shard
// (copy this rank's owned pieces out of a full buffer).
//
// Invariants: a store binds only the parts of units its plan covers, never another store's; the
// sharded gradient store holds a bucket's full gradient buffer only from the
// first backward use of one of its units until its reduce-scatter starts; the sharded parameter
// store binds a unit to a gathered copy only between gather() and release(), so a use outside
// that window is caught as an unbound view.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "model/parameters.h"
#include "parallel/buckets.h"

namespace trillion::parallel {

// full[b.begin, b.end) <- the n chunks of bucket b gathered from every rank's `shard` (this
// plan's shard starting at element `base` of it), for every bucket. `scratch_category` accounts
// the padded temporaries.
void gather_shards(comm::Communicator& dp, Backend& be, MemoryTracker& tracker,
                   const BucketPlan& plan, const Buffer& shard, const Buffer& full,
                   MemoryCategory scratch_category, int64_t base = 0);

// shard[base...] <- this rank's owned pieces of `full` (padding left as it is).
void take_shard(Backend& be, const BucketPlan& plan, const Buffer& full, const Buffer& shard,
                int64_t base = 0);

// Where a sharded store (ZeRO-3's parameters, ZeRO-2/3's gradients) keeps its shard: in a buffer
// of its own (host == nullptr) with `extra` more elements reserved after the shard, or at element
// `base` of `host`, a buffer another store owns. Expert parallelism runs two DataParallels; the
// second one's shards follow the first's in the first one's buffers ([dense | expert], as the
// optimizer state), so one optimizer step updates both from one parameter and one gradient
// buffer.
struct ShardPlace {
  const Buffer* host = nullptr;
  int64_t base = 0;
  int64_t extra = 0;
};

// Where the parameters live between steps, and how they are made usable.
class ParameterStore {
 public:
  virtual ~ParameterStore() = default;
  virtual bool sharded() const = 0;  // the optimizer updates a shard-layout buffer
  // What the optimizer updates (the model's buffer, or this rank's shard).
  virtual const Buffer& optimizer_params() = 0;
  // Unit u is about to be used / is no longer used; `next` (or -1) will be used after it.
  virtual void acquire(int unit, int next) {}
  virtual void prefetch(int unit) {}  // start making unit `unit` (or -1: none) usable
  virtual void release(int unit) {}
  virtual void poll() {}
  // After the optimizer step: make every rank's parameters whole again.
  virtual void finish_step() {}
  virtual void init(uint64_t seed) = 0;
  virtual void gather_full(const Buffer& full) = 0;  // every rank gets the table layout
  virtual void load_full(const Buffer& full) = 0;
  // The bf16 values of the bound fp32 weights [fp32, fp32 + count), laid out alike, where this
  // store widened them from bf16 (a precision recipe's store), else null: the linear GEMMs read
  // them instead of rounding the widened copy again (model/linear_gemm.h).
  virtual const bf16* bf16_weights(const float* fp32, int64_t count) const { return nullptr; }
};

// One bucket's reduction in flight.
struct Reduction {
  int bucket = 0;
  comm::Handle handle;
  Buffer input, output;  // padded bucket gradients (when they cannot be reduced in place), result
};

// Where gradients accumulate and how a finished bucket is reduced across the dp group.
class GradientStore {
 public:
  virtual ~GradientStore() = default;
  virtual bool sharded() const = 0;  // the optimizer reads a shard-layout buffer
  // Whether each micro-batch is reduced (sharded stores: their bucket buffers are temporary), or
  // only the last one (the model's own buffer accumulates the micro-batches).
  virtual bool reduces_every_micro_batch() const = 0;
  virtual void begin_step() = 0;    // zero the gradients
  virtual void open(int bucket) {}  // a backward pass is about to write the bucket's gradients
  // Every unit of the bucket has finished one more micro-batch's backward (called before the
  // reduction that micro-batch may start).
  virtual void end_micro_batch(int bucket) {}
  // Sum of squares of the bucket's gradients on this rank before they are reduced (called just
  // before start(); for the gradient noise scale).
  virtual double local_sum_squares(int bucket) = 0;
  virtual Reduction start(int bucket) = 0;
  virtual void complete(Reduction& r) = 0;
  virtual const Buffer& optimizer_grads() = 0;
  // Sum of squares of the gradients this rank is responsible for (all of them when replicated).
  virtual double sum_squares() = 0;
  virtual void scale(double factor) = 0;
};

// The plan's buckets may cover part of each unit (BucketPlan over DataParallelOptions::ranges):
// the stores then bind, gather and reduce that part only.
std::unique_ptr<ParameterStore> make_parameter_store(int stage, ParameterSet& params,
                                                     comm::Communicator& dp, Backend& be,
                                                     MemoryTracker& tracker, const BucketPlan& plan,
                                                     const ShardPlace& place = {});
// whole: the plan covers every element of the table (norms and scaling then run over the whole
// buffer at once, as the one-process optimizer does).
std::unique_ptr<GradientStore> make_gradient_store(int stage, ParameterSet& params,
                                                   comm::Communicator& dp, Backend& be,
                                                   MemoryTracker& tracker, const BucketPlan& plan,
                                                   bool whole = true, const ShardPlace& place = {});

}  // namespace trillion::parallel
