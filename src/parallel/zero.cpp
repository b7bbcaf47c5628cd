// See zero.h.
#include "parallel/zero.h"

#include "core/error.h"

namespace trillion::parallel {

void gather_shards(comm::Communicator& dp, Backend& be, MemoryTracker& tracker,
                   const BucketPlan& plan, const Buffer& shard, const Buffer& full,
                   MemoryCategory scratch_category, int64_t base) {
  const int n = plan.ranks();
  // A bucket whose chunks tile it exactly is gathered straight into the full buffer; only a
  // padded one (size not a multiple of n) needs a scratch buffer and a copy. (Scratch for every
  // bucket, allocated and zeroed each step, cost ZeRO-1 three passes over the model per step.)
  std::vector<Buffer> padded(plan.buckets().size());
  std::vector<comm::Handle> handles;
  for (size_t i = 0; i < plan.buckets().size(); ++i) {
    const Bucket& b = plan.buckets()[i];
    const Tensor input = shard.view(base + b.shard_offset, {b.chunk});
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

void take_shard(Backend& be, const BucketPlan& plan, const Buffer& full, const Buffer& shard,
                int64_t base) {
  for (const Bucket& b : plan.buckets()) {
    const int64_t lo = b.owned_begin(plan.rank()), hi = b.owned_end(plan.rank());
    if (hi > lo) be.copy(shard.view(base + b.shard_offset, {hi - lo}), full.view(lo, {hi - lo}));
  }
}

namespace {

// The part of unit u that bucket b covers (the whole unit unless the plan covers parts).
UnitRange part_of(const ParameterSet& params, int u, const Bucket& b) {
  const UnitRange r = params.unit_range(u);
  return {std::max(r.begin, b.begin), std::min(r.end, b.end)};
}

// Binds (data != nullptr: data holds bucket b from b.begin on) or unbinds bucket b's parts of its
// units' parameters or gradients.
void bind_bucket(ParameterSet& params, const Bucket& b, void* data, bool gradients) {
  const int64_t elem = static_cast<int64_t>(dtype_size(params.dtype()));
  for (int u = b.first_unit; u <= b.last_unit; ++u) {
    const UnitRange part = part_of(params, u, b);
    char* at = data == nullptr ? nullptr : static_cast<char*>(data) + (part.begin - b.begin) * elem;
    if (gradients) {
      params.bind_gradients(u, part, at);
    } else {
      params.bind_parameters(u, part, at);
    }
  }
}

// A sharded store's shard: its own buffer (plus place.extra elements for a second store), or a
// place in another store's.
struct Shard {
  Shard(MemoryTracker& tracker, MemoryCategory category, DType dtype, const BucketPlan& plan,
        const ShardPlace& place)
      : own(place.host != nullptr
                ? Buffer()
                : Buffer(tracker, category, dtype, plan.shard_elements() + place.extra)),
        buffer(place.host != nullptr ? place.host : &own),
        base(place.host != nullptr ? place.base : 0),
        elements(plan.shard_elements()) {}
  Tensor chunk(const Bucket& b) const { return buffer->view(base + b.shard_offset, {b.chunk}); }
  Tensor all() const { return buffer->view(base, {elements}); }
  Buffer own;
  const Buffer* buffer;
  int64_t base, elements;
};

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
                    MemoryTracker& tracker, const BucketPlan& plan, const ShardPlace& place)
      : params_(params),
        dp_(dp),
        be_(be),
        tracker_(tracker),
        plan_(plan),
        shard_(tracker, MemoryCategory::parameters, params.dtype(), plan, place),
        units_(params.num_units()) {
    for (int u = 0; u < params.num_units(); ++u) {
      const Bucket& b = plan.buckets()[plan.bucket_of_unit(u)];
      TRILLION_CHECK(b.first_unit == u && b.last_unit == u, "ZeRO-3 needs one unit per bucket");
    }
  }
  bool sharded() const override { return true; }
  const Buffer& optimizer_params() override { return *shard_.buffer; }

  void acquire(int unit, int next) override {
    prefetch(unit);
    Gathered& g = units_[unit];
    if (g.pending) {
      g.pending->wait();
      g.pending.reset();
    }
    if (!g.bound && g.full.count() > 0) bind_bucket(params_, bucket(unit), g.full.raw(), false);
    g.bound = true;
    prefetch(next);
  }
  void release(int unit) override {
    Gathered& g = units_[unit];
    if (g.pending) g.pending->wait();  // never free memory MPI is still writing
    g.pending.reset();
    if (g.full.count() > 0) bind_bucket(params_, bucket(unit), nullptr, false);
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
    const Bucket& b = bucket(unit);
    if (g.full.count() > 0 || b.size() == 0) return;  // gathered, or no part of it here
    g.full = Buffer(tracker_, MemoryCategory::parameters, params_.dtype(), b.chunk * plan_.ranks());
    g.pending = dp_.start_all_gather(shard_.chunk(b), g.full.flat());
  }
  void init(uint64_t seed) override {
    // Initialise a full temporary copy of what the plan covers (values keyed by tensor and
    // element), keep the shard.
    Buffer full(tracker_, MemoryCategory::workspace, params_.dtype(),
                params_.table().total_elements());
    const size_t elem = dtype_size(params_.dtype());
    for (const Bucket& b : plan_.buckets()) {
      bind_bucket(params_, b, static_cast<char*>(full.raw()) + b.begin * elem, false);
    }
    params_.init(seed, [&](int spec) { return covers(params_.table().spec(spec).offset); });
    for (const Bucket& b : plan_.buckets()) bind_bucket(params_, b, nullptr, false);
    take_shard(be_, plan_, full, *shard_.buffer, shard_.base);
  }
  void gather_full(const Buffer& full) override {
    gather_shards(dp_, be_, tracker_, plan_, *shard_.buffer, full, MemoryCategory::workspace,
                  shard_.base);
  }
  void load_full(const Buffer& full) override {
    take_shard(be_, plan_, full, *shard_.buffer, shard_.base);
  }

 private:
  struct Gathered {
    Buffer full;  // padded: chunk * n elements
    comm::Handle pending;
    bool bound = false;
  };
  const Bucket& bucket(int unit) const { return plan_.buckets()[plan_.bucket_of_unit(unit)]; }
  bool covers(int64_t element) const {
    for (const Bucket& b : plan_.buckets()) {
      if (element >= b.begin && element < b.end) return true;
    }
    return false;
  }

  ParameterSet& params_;
  comm::Communicator& dp_;
  Backend& be_;
  MemoryTracker& tracker_;
  const BucketPlan& plan_;
  Shard shard_;
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
                   MemoryTracker& tracker, const BucketPlan& plan, const ShardPlace& place)
      : params_(params),
        dp_(dp),
        be_(be),
        tracker_(tracker),
        plan_(plan),
        shard_(tracker, MemoryCategory::gradients, params.dtype(), plan, place),
        buckets_(plan.buckets().size()) {}
  bool sharded() const override { return true; }
  bool reduces_every_micro_batch() const override { return true; }
  void begin_step() override {
    if (shard_.elements > 0) be_.fill(shard_.all(), 0.0);
  }
  void open(int bucket) override {
    Buffer& buf = buckets_[bucket];
    const Bucket& b = plan_.buckets()[bucket];
    if (buf.count() > 0 || b.size() == 0) return;
    buf = Buffer(tracker_, MemoryCategory::gradients, params_.dtype(), b.chunk * plan_.ranks());
    bind_bucket(params_, b, buf.raw(), true);
  }
  double local_sum_squares(int bucket) override {  // padding is zero
    return be_.sum_squares(buckets_[bucket].flat());
  }
  Reduction start(int bucket) override {
    const Bucket& b = plan_.buckets()[bucket];
    bind_bucket(params_, b, nullptr, true);
    Reduction r;
    r.bucket = bucket;
    r.input = std::move(buckets_[bucket]);
    r.output = Buffer(tracker_, MemoryCategory::gradients, params_.dtype(), b.chunk);
    r.handle = dp_.start_reduce_scatter(r.input.flat(), r.output.flat());
    return r;
  }
  void complete(Reduction& r) override {
    const Bucket& b = plan_.buckets()[r.bucket];
    be_.add(shard_.chunk(b), r.output.flat());
  }
  const Buffer& optimizer_grads() override { return *shard_.buffer; }
  double sum_squares() override {  // padding is zero
    return shard_.elements > 0 ? be_.sum_squares(shard_.all()) : 0.0;
  }
  void scale(double f) override {
    if (shard_.elements > 0) be_.scale(shard_.all(), f);
  }

 private:
  ParameterSet& params_;
  comm::Communicator& dp_;
  Backend& be_;
  MemoryTracker& tracker_;
  const BucketPlan& plan_;
  Shard shard_;
  std::vector<Buffer> buckets_;
};

}  // namespace

std::unique_ptr<ParameterStore> make_parameter_store(int stage, ParameterSet& params,
                                                     comm::Communicator& dp, Backend& be,
                                                     MemoryTracker& tracker, const BucketPlan& plan,
                                                     const ShardPlace& place) {
  if (stage == 0) return std::make_unique<ReplicatedParameters>(params, be);
  if (stage <= 2) return std::make_unique<RefreshedParameters>(params, dp, be, tracker, plan);
  return std::make_unique<ShardedParameters>(params, dp, be, tracker, plan, place);
}

std::unique_ptr<GradientStore> make_gradient_store(int stage, ParameterSet& params,
                                                   comm::Communicator& dp, Backend& be,
                                                   MemoryTracker& tracker, const BucketPlan& plan,
                                                   bool whole, const ShardPlace& place) {
  if (stage == 0) return std::make_unique<AllReducedGradients>(params, dp, be, plan, whole);
  if (stage == 1) return std::make_unique<ReduceScatteredGradients>(params, dp, be, tracker, plan);
  return std::make_unique<ShardedGradients>(params, dp, be, tracker, plan, place);
}

}  // namespace trillion::parallel
