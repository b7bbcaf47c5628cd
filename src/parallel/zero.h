// ZeRO (Rajbhandari et al. 1910.02054) building blocks over a BucketPlan:
// - shard <-> full conversions: gather_shards (all-gather every bucket's chunks into the full
//   table layout: ZeRO-1/2 parameter refresh after the update, checkpoints of sharded state) and
//   take_shard (copy this rank's owned pieces out of a full buffer: initialisation, resume);
// - GradientShards, the ZeRO-2/3 gradient store: the persistent shard (P/n elements) plus, per
//   bucket, a full (padded) gradient buffer that exists only from the bucket's first backward unit
//   until its reduce-scatter is started; the reduced chunk is then added into the shard (+=, so
//   micro-batches accumulate);
// - ParameterShards, ZeRO-3's parameter store: the persistent shard (P/n elements) plus, per
//   unit, a gathered full copy that exists only between gather() and release(). The model's unit
//   is bound to the gathered copy while it exists, so a use outside that window is caught.
//   prefetch() starts the next unit's all-gather early so it overlaps the current unit's compute.
#pragma once

#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "parallel/buckets.h"

namespace trillion::parallel {

// full[b.begin, b.end) <- the n chunks of bucket b gathered from every rank's `shard`, for every
// bucket. `scratch_category` accounts the padded temporaries.
void gather_shards(comm::Communicator& dp, Backend& be, MemoryTracker& tracker,
                   const BucketPlan& plan, const Buffer& shard, const Buffer& full,
                   MemoryCategory scratch_category);

// shard <- this rank's owned pieces of `full` (padding left as it is).
void take_shard(Backend& be, const BucketPlan& plan, const Buffer& full, const Buffer& shard);

class GradientShards {
 public:
  GradientShards(Transformer& model, const BucketPlan& plan, MemoryTracker& tracker);
  Buffer& shard() { return shard_; }
  // Allocates bucket b's zeroed buffer and binds its units' gradients to it (once per bucket).
  void open(int bucket);
  // Unbinds bucket b's units and hands its buffer (chunk * n elements) to the reduction.
  Buffer close(int bucket);
  // shard chunk of bucket b += reduced (chunk elements).
  void accumulate(Backend& be, int bucket, const Buffer& reduced);

 private:
  Transformer& model_;
  const BucketPlan& plan_;
  MemoryTracker& tracker_;
  Buffer shard_;
  std::vector<Buffer> buckets_;
};

class ParameterShards {
 public:
  // plan must have one unit per bucket.
  ParameterShards(Transformer& model, comm::Communicator& dp, const BucketPlan& plan,
                  MemoryTracker& tracker);
  Buffer& shard() { return shard_; }
  // Starts unit u's all-gather if it is neither gathered nor in flight.
  void prefetch(int unit);
  // Completes unit u's all-gather and binds the model's unit to it.
  void gather(int unit);
  // Unbinds and frees unit u's gathered copy.
  void release(int unit);
  // Makes progress on in-flight gathers without blocking.
  void poll();

 private:
  struct Gathered {
    Buffer full;  // padded: chunk * n elements
    comm::Handle pending;
    bool bound = false;
  };
  Transformer& model_;
  comm::Communicator& dp_;
  const BucketPlan& plan_;
  MemoryTracker& tracker_;
  Buffer shard_;
  std::vector<Gathered> units_;
};

}  // namespace trillion::parallel
