// See zero.h.
#include "parallel/zero.h"

#include "core/error.h"

namespace trillion::parallel {

void gather_shards(comm::Communicator& dp, Backend& be, MemoryTracker& tracker,
                   const BucketPlan& plan, const Buffer& shard, const Buffer& full,
                   MemoryCategory scratch_category) {
  const int n = plan.ranks();
  // A bucket whose chunks tile it exactly is gathered straight into the full buffer; only a
  // padded one (size not a multiple of n) needs a scratch buffer and a copy. (Scratch for every
  // bucket, allocated and zeroed each step, cost ZeRO-1 three passes over the model per step.)
  std::vector<Buffer> padded(plan.buckets().size());
  std::vector<comm::Handle> handles;
  for (size_t i = 0; i < plan.buckets().size(); ++i) {
    const Bucket& b = plan.buckets()[i];
    const Tensor input = shard.view(b.shard_offset, {b.chunk});
    if (b.chunk * n == b.size()) {
      handles.push_back(dp.start_all_gather(input, full.view(b.begin, {b.size()})));
      continue;
    }
    padded[i] = Buffer(tracker, scratch_category, shard.dtype(), b.chunk * n);
    handles.push_back(dp.start_all_gather(input, padded[i].flat()));
  }
  for (size_t i = 0; i < handles.size(); ++i) {
    handles[i]->wait();
    const Bucket& b = plan.buckets()[i];
    if (padded[i].count() > 0)
      be.copy(full.view(b.begin, {b.size()}), padded[i].view(0, {b.size()}));
  }
}

void take_shard(Backend& be, const BucketPlan& plan, const Buffer& full, const Buffer& shard) {
  for (const Bucket& b : plan.buckets()) {
    const int64_t lo = b.owned_begin(plan.rank()), hi = b.owned_end(plan.rank());
    if (hi > lo) be.copy(shard.view(b.shard_offset, {hi - lo}), full.view(lo, {hi - lo}));
  }
}

namespace {

// ---- parameter stores -------------------------------------------------------------------------

// Stage 0: every rank holds and updates all parameters in the model's own buffer.
class ReplicatedParameters : public ParameterStore {
 public:
  ReplicatedParameters(ParameterSet& params, Backend& be) : params_(params), be_(be) {}
  bool sharded() const override { return false; }
  const Buffer& optimizer_params() override { return params_.parameters(); }
  void init(uint64_t seed) override { params_.init(seed); }
  void gather_full(const Buffer& full) override {
    be_.copy(full.flat(), params_.parameters().flat());
  }
  void load_full(const Buffer& full) override {
    be_.copy(params_.parameters().flat(), full.flat());
  }

 protected:
  ParameterSet& params_;
  Backend& be_;
};

// Stages 1-2: the optimizer updates only this rank's owned pieces (in the full buffer); the
// updated pieces are then all-gathered so every rank holds the whole model again.
class RefreshedParameters : public ReplicatedParameters {
 public:
  RefreshedParameters(ParameterSet& params, comm::Communicator& dp, Backend& be,
                      MemoryTracker& tracker, const BucketPlan& plan)
      : ReplicatedParameters(params, be), dp_(dp), tracker_(tracker), plan_(plan) {}
  void finish_step() override {
    Buffer shard(tracker_, MemoryCategory::workspace, params_.dtype(), plan_.shard_elements());
    take_shard(be_, plan_, params_.parameters(), shard);
    gather_shards(dp_, be_, tracker_, plan_, shard, params_.parameters(),
                  MemoryCategory::workspace);
  }

 private:
  comm::Communicator& dp_;
  MemoryTracker& tracker_;
  const BucketPlan& plan_;
};

// Stage 3: the persistent shard (P/n elements) plus, per unit, a gathered full copy that exists
// only between acquire() and release(). acquire() also starts the next unit's all-gather, so it
// overlaps the current unit's compute.
class ShardedParameters : public ParameterStore {
 public:
  ShardedParameters(ParameterSet& params, comm::Communicator& dp, Backend& be,
                    MemoryTracker& tracker, const BucketPlan& plan)
      : params_(params),
        dp_(dp),
        be_(be),
        tracker_(tracker),
        plan_(plan),
        shard_(tracker, MemoryCategory::parameters, params.dtype(), plan.shard_elements()),
        units_(params.num_units()) {
    for (int u = 0; u < params.num_units(); ++u) {
      const Bucket& b = plan.buckets()[plan.bucket_of_unit(u)];
      TRILLION_CHECK(b.first_unit == u && b.last_unit == u, "ZeRO-3 needs one unit per bucket");
    }
  }
  bool sharded() const override { return true; }
  const Buffer& optimizer_params() override { return shard_; }

  void acquire(int unit, int next) override {
    prefetch(unit);
    Gathered& g = units_[unit];
    if (g.pending) {
      g.pending->wait();
      g.pending.reset();
    }
    if (!g.bound) params_.bind_parameters(unit, g.full.raw());
    g.bound = true;
    prefetch(next);
  }
  void release(int unit) override {
    Gathered& g = units_[unit];
    if (g.pending) g.pending->wait();  // never free memory MPI is still writing
    g.pending.reset();
    params_.bind_parameters(unit, nullptr);
    g.bound = false;
    g.full = Buffer();
  }
  void poll() override {
    for (Gathered& g : units_) {
      if (g.pending) g.pending->test();
    }
  }
  void prefetch(int unit) override {
    if (unit < 0 || unit >= static_cast<int>(units_.size())) return;
    Gathered& g = units_[unit];
    if (g.full.count() > 0) return;
    const Bucket& b = plan_.buckets()[plan_.bucket_of_unit(unit)];
    g.full = Buffer(tracker_, MemoryCategory::parameters, shard_.dtype(), b.chunk * plan_.ranks());
    g.pending = dp_.start_all_gather(shard_.view(b.shard_offset, {b.chunk}), g.full.flat());
  }
  void init(uint64_t seed) override {
    // Initialise a full temporary copy (values keyed by tensor and element), keep the shard.
    Buffer full(tracker_, MemoryCategory::workspace, params_.dtype(),
                params_.table().total_elements());
    bind_all(full);
    params_.init(seed);
    bind_all(Buffer());
    take_shard(be_, plan_, full, shard_);
  }
  void gather_full(const Buffer& full) override {
    gather_shards(dp_, be_, tracker_, plan_, shard_, full, MemoryCategory::workspace);
  }
  void load_full(const Buffer& full) override { take_shard(be_, plan_, full, shard_); }

 private:
  struct Gathered {
    Buffer full;  // padded: chunk * n elements
    comm::Handle pending;
    bool bound = false;
  };
  void bind_all(const Buffer& full) {
    const size_t elem = dtype_size(params_.dtype());
    for (int u = 0; u < params_.num_units(); ++u) {
      params_.bind_parameters(u, full.count() == 0 ? nullptr
                                                   : static_cast<char*>(full.raw()) +
                                                         params_.unit_range(u).begin * elem);
    }
  }

  ParameterSet& params_;
  comm::Communicator& dp_;
  Backend& be_;
  MemoryTracker& tracker_;
  const BucketPlan& plan_;
  Buffer shard_;
  std::vector<Gathered> units_;
};

// ---- gradient stores --------------------------------------------------------------------------

// Stage 0: gradients accumulate in the model's buffer and each bucket is all-reduced in place.
class AllReducedGradients : public GradientStore {
 public:
  AllReducedGradients(ParameterSet& params, comm::Communicator& dp, Backend& be,
                      const BucketPlan& plan, bool whole = true)
      : params_(params), dp_(dp), be_(be), plan_(plan), whole_(whole) {}
  bool sharded() const override { return false; }
  bool reduces_every_micro_batch() const override { return false; }
  void begin_step() override { params_.zero_grad(); }
  double local_sum_squares(int bucket) override {
    const Bucket& b = plan_.buckets()[bucket];
    return be_.sum_squares(params_.gradients().view(b.begin, {b.size()}));
  }
  Reduction start(int bucket) override {
    const Bucket& b = plan_.buckets()[bucket];
    Reduction r;
    r.bucket = bucket;
    r.handle = dp_.start_all_reduce(params_.gradients().view(b.begin, {b.size()}));
    return r;
  }
  void complete(Reduction& r) override {}
  const Buffer& optimizer_grads() override { return params_.gradients(); }
  // Every rank holds the same reduced gradients, so its sum is already the total.
  double sum_squares() override {
    if (whole_) return be_.sum_squares(params_.gradients().flat());
    double s = 0;
    for (const Bucket& b : plan_.buckets()) {
      if (b.size() > 0) s += be_.sum_squares(params_.gradients().view(b.begin, {b.size()}));
    }
    return s;
  }
  void scale(double f) override {
    if (whole_) return be_.scale(params_.gradients().flat(), f);
    for (const Bucket& b : plan_.buckets()) {
      if (b.size() > 0) be_.scale(params_.gradients().view(b.begin, {b.size()}), f);
    }
  }

 protected:
  ParameterSet& params_;
  comm::Communicator& dp_;
  Backend& be_;
  const BucketPlan& plan_;
  bool whole_;
};

// Stage 1: gradients accumulate in the model's buffer; each bucket is reduce-scattered and this
// rank's reduced chunk copied back over its owned range (the rest is stale and never read).
class ReduceScatteredGradients : public AllReducedGradients {
 public:
  ReduceScatteredGradients(ParameterSet& params, comm::Communicator& dp, Backend& be,
                           MemoryTracker& tracker, const BucketPlan& plan)
      : AllReducedGradients(params, dp, be, plan),
        tracker_(tracker),
        pieces_(plan.owned_pieces(params.table())) {}
  Reduction start(int bucket) override {
    const Bucket& b = plan_.buckets()[bucket];
    const int64_t padded = b.chunk * plan_.ranks();
    Reduction r;
    r.bucket = bucket;
    Tensor input = params_.gradients().view(b.begin, {b.size()});
    if (padded != b.size()) {
      r.input = Buffer(tracker_, MemoryCategory::workspace, params_.dtype(), padded);  // zeroed
      be_.copy(r.input.view(0, {b.size()}), input);
      input = r.input.flat();
    }
    r.output = Buffer(tracker_, MemoryCategory::gradients, params_.dtype(), b.chunk);
    r.handle = dp_.start_reduce_scatter(input, r.output.flat());
    return r;
  }
  void complete(Reduction& r) override {
    const Bucket& b = plan_.buckets()[r.bucket];
    const int64_t lo = b.owned_begin(plan_.rank()), hi = b.owned_end(plan_.rank());
    if (hi > lo) be_.copy(params_.gradients().view(lo, {hi - lo}), r.output.view(0, {hi - lo}));
  }
  double sum_squares() override {
    double s = 0;
    for (const OwnedPiece& p : pieces_) {
      s += be_.sum_squares(params_.gradients().view(p.global, {p.length}));
    }
    return s;
  }
  void scale(double f) override {
    for (const OwnedPiece& p : pieces_)
      be_.scale(params_.gradients().view(p.global, {p.length}), f);
  }

 private:
  MemoryTracker& tracker_;
  std::vector<OwnedPiece> pieces_;
};

// Stages 2-3: the persistent gradient shard (P/n elements) plus, per bucket, a full (padded)
// buffer that exists only from the bucket's first backward use until its reduce-scatter starts;
// the reduced chunk is then added into the shard (+=, so micro-batches accumulate).
class ShardedGradients : public GradientStore {
 public:
  ShardedGradients(ParameterSet& params, comm::Communicator& dp, Backend& be,
                   MemoryTracker& tracker, const BucketPlan& plan)
      : params_(params),
        dp_(dp),
        be_(be),
        tracker_(tracker),
        plan_(plan),
        shard_(tracker, MemoryCategory::gradients, params.dtype(), plan.shard_elements()),
        buckets_(plan.buckets().size()) {}
  bool sharded() const override { return true; }
  bool reduces_every_micro_batch() const override { return true; }
  void begin_step() override { be_.fill(shard_.flat(), 0.0); }
  void open(int bucket) override {
    Buffer& buf = buckets_[bucket];
    if (buf.count() > 0) return;
    const Bucket& b = plan_.buckets()[bucket];
    buf = Buffer(tracker_, MemoryCategory::gradients, shard_.dtype(), b.chunk * plan_.ranks());
    const size_t elem = dtype_size(buf.dtype());
    for (int u = b.first_unit; u <= b.last_unit; ++u) {
      params_.bind_gradients(
          u, static_cast<char*>(buf.raw()) + (params_.unit_range(u).begin - b.begin) * elem);
    }
  }
  double local_sum_squares(int bucket) override {  // padding is zero
    return be_.sum_squares(buckets_[bucket].flat());
  }
  Reduction start(int bucket) override {
    const Bucket& b = plan_.buckets()[bucket];
    for (int u = b.first_unit; u <= b.last_unit; ++u) params_.bind_gradients(u, nullptr);
    Reduction r;
    r.bucket = bucket;
    r.input = std::move(buckets_[bucket]);
    r.output = Buffer(tracker_, MemoryCategory::gradients, params_.dtype(), b.chunk);
    r.handle = dp_.start_reduce_scatter(r.input.flat(), r.output.flat());
    return r;
  }
  void complete(Reduction& r) override {
    const Bucket& b = plan_.buckets()[r.bucket];
    be_.add(shard_.view(b.shard_offset, {b.chunk}), r.output.flat());
  }
  const Buffer& optimizer_grads() override { return shard_; }
  double sum_squares() override { return be_.sum_squares(shard_.flat()); }  // padding is zero
  void scale(double f) override { be_.scale(shard_.flat(), f); }

 private:
  ParameterSet& params_;
  comm::Communicator& dp_;
  Backend& be_;
  MemoryTracker& tracker_;
  const BucketPlan& plan_;
  Buffer shard_;
  std::vector<Buffer> buckets_;
};

}  // namespace

std::unique_ptr<ParameterStore> make_parameter_store(int stage, ParameterSet& params,
                                                     comm::Communicator& dp, Backend& be,
                                                     MemoryTracker& tracker,
                                                     const BucketPlan& plan) {
  if (stage == 0) return std::make_unique<ReplicatedParameters>(params, be);
  if (stage <= 2) return std::make_unique<RefreshedParameters>(params, dp, be, tracker, plan);
  return std::make_unique<ShardedParameters>(params, dp, be, tracker, plan);
}

std::unique_ptr<GradientStore> make_gradient_store(int stage, ParameterSet& params,
                                                   comm::Communicator& dp, Backend& be,
                                                   MemoryTracker& tracker, const BucketPlan& plan,
                                                   bool whole) {
  if (stage == 0) return std::make_unique<AllReducedGradients>(params, dp, be, plan, whole);
  if (stage == 1) return std::make_unique<ReduceScatteredGradients>(params, dp, be, tracker, plan);
  return std::make_unique<ShardedGradients>(params, dp, be, tracker, plan);
}

}  // namespace trillion::parallel
