// See zero.h.
#include "parallel/zero.h"

#include "core/error.h"

namespace trillion::parallel {

void gather_shards(comm::Communicator& dp, Backend& be, MemoryTracker& tracker,
                   const BucketPlan& plan, const Buffer& shard, const Buffer& full,
                   MemoryCategory scratch_category) {
  const int n = plan.ranks();
  std::vector<Buffer> padded;
  std::vector<comm::Handle> handles;
  padded.reserve(plan.buckets().size());
  for (const Bucket& b : plan.buckets()) {
    padded.emplace_back(tracker, scratch_category, shard.dtype(), b.chunk * n);
    handles.push_back(
        dp.start_all_gather(shard.view(b.shard_offset, {b.chunk}), padded.back().flat()));
  }
  for (size_t i = 0; i < handles.size(); ++i) {
    handles[i]->wait();
    const Bucket& b = plan.buckets()[i];
    be.copy(full.view(b.begin, {b.size()}), padded[i].view(0, {b.size()}));
  }
}

void take_shard(Backend& be, const BucketPlan& plan, const Buffer& full, const Buffer& shard) {
  for (const Bucket& b : plan.buckets()) {
    const int64_t lo = b.owned_begin(plan.rank()), hi = b.owned_end(plan.rank());
    if (hi > lo) be.copy(shard.view(b.shard_offset, {hi - lo}), full.view(lo, {hi - lo}));
  }
}

GradientShards::GradientShards(Transformer& model, const BucketPlan& plan, MemoryTracker& tracker)
    : model_(model),
      plan_(plan),
      tracker_(tracker),
      shard_(tracker, MemoryCategory::gradients, model.config().dtype, plan.shard_elements()),
      buckets_(plan.buckets().size()) {}

void GradientShards::open(int bucket) {
  Buffer& buf = buckets_[bucket];
  if (buf.count() > 0) return;
  const Bucket& b = plan_.buckets()[bucket];
  buf = Buffer(tracker_, MemoryCategory::gradients, shard_.dtype(), b.chunk * plan_.ranks());
  const size_t elem = dtype_size(buf.dtype());
  for (int u = b.first_unit; u <= b.last_unit; ++u) {
    model_.bind_gradients(
        u, static_cast<char*>(buf.raw()) + (model_.unit_range(u).begin - b.begin) * elem);
  }
}

Buffer GradientShards::close(int bucket) {
  const Bucket& b = plan_.buckets()[bucket];
  for (int u = b.first_unit; u <= b.last_unit; ++u) model_.bind_gradients(u, nullptr);
  return std::move(buckets_[bucket]);
}

void GradientShards::accumulate(Backend& be, int bucket, const Buffer& reduced) {
  const Bucket& b = plan_.buckets()[bucket];
  be.add(shard_.view(b.shard_offset, {b.chunk}), reduced.flat());
}

ParameterShards::ParameterShards(Transformer& model, comm::Communicator& dp, const BucketPlan& plan,
                                 MemoryTracker& tracker)
    : model_(model),
      dp_(dp),
      plan_(plan),
      tracker_(tracker),
      shard_(tracker, MemoryCategory::parameters, model.config().dtype, plan.shard_elements()),
      units_(model.num_units()) {
  for (int u = 0; u < model.num_units(); ++u) {
    const Bucket& b = plan.buckets()[plan.bucket_of_unit(u)];
    TRILLION_CHECK(b.first_unit == u && b.last_unit == u, "ZeRO-3 needs one unit per bucket");
  }
}

void ParameterShards::prefetch(int unit) {
  if (unit < 0 || unit >= static_cast<int>(units_.size())) return;
  Gathered& g = units_[unit];
  if (g.full.count() > 0) return;
  const Bucket& b = plan_.buckets()[plan_.bucket_of_unit(unit)];
  g.full = Buffer(tracker_, MemoryCategory::parameters, shard_.dtype(), b.chunk * plan_.ranks());
  g.pending = dp_.start_all_gather(shard_.view(b.shard_offset, {b.chunk}), g.full.flat());
}

void ParameterShards::gather(int unit) {
  prefetch(unit);
  Gathered& g = units_[unit];
  if (g.pending) {
    g.pending->wait();
    g.pending.reset();
  }
  if (!g.bound) model_.bind_parameters(unit, g.full.raw());
  g.bound = true;
}

void ParameterShards::release(int unit) {
  Gathered& g = units_[unit];
  if (g.pending) g.pending->wait();  // never free memory MPI is still writing
  g.pending.reset();
  model_.bind_parameters(unit, nullptr);
  g.bound = false;
  g.full = Buffer();
}

void ParameterShards::poll() {
  for (Gathered& g : units_) {
    if (g.pending) g.pending->test();
  }
}

}  // namespace trillion::parallel
