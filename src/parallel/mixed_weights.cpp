// See mixed_weights.h.
#include "parallel/mixed_weights.h"

#include <vector>

#include "core/error.h"

namespace trillion::parallel {

namespace {

class MixedPrecisionWeights : public ParameterStore {
 public:
  MixedPrecisionWeights(int stage, ParameterSet& params, comm::Communicator& dp, Backend& be,
                        MemoryTracker& tracker, const BucketPlan& plan)
      : stage_(stage),
        params_(params),
        dp_(dp),
        be_(be),
        tracker_(tracker),
        plan_(plan),
        master_(tracker, MemoryCategory::optimizer, DType::f32,
                stage == 0 ? params.table().total_elements() : plan.shard_elements()),
        copy_(tracker, MemoryCategory::parameters, DType::bf16,
              stage < 3 ? params.table().total_elements() : plan.shard_elements()),
        units_(params.num_units()) {
    TRILLION_CHECK(params.dtype() == DType::f32, "a precision recipe needs fp32 parameters");
    TRILLION_CHECK(params.parameters().count() == 0,
                   "a precision recipe's weights live in its store, not in the model");
    if (stage_ == 3) {
      for (int u = 0; u < params.num_units(); ++u) {
        const Bucket& b = plan.buckets()[plan.bucket_of_unit(u)];
        TRILLION_CHECK(b.first_unit == u && b.last_unit == u, "ZeRO-3 needs one unit per bucket");
      }
    }
  }
  bool sharded() const override { return stage_ >= 1; }
  const Buffer& optimizer_params() override { return master_; }

  void acquire(int unit, int next) override {
    Unit& g = units_[unit];
    if (!g.bound) {
      const UnitRange r = params_.unit_range(unit);
      if (stage_ == 3) {
        prefetch(unit);
        if (g.pending) g.pending->wait();
        g.pending.reset();
      }
      g.widened = Buffer(tracker_, MemoryCategory::workspace, DType::f32, r.size());
      be_.copy(g.widened.flat(),
               stage_ == 3 ? g.gathered.view(0, {r.size()}) : copy_.view(r.begin, {r.size()}));
      params_.bind_parameters(unit, g.widened.raw());
      g.bound = true;
    }
    prefetch(next);
  }
  void release(int unit) override {
    Unit& g = units_[unit];
    if (g.pending) g.pending->wait();  // never free memory MPI is still writing
    g.pending.reset();
    params_.bind_parameters(unit, nullptr);
    g.bound = false;
    g.widened = Buffer();
    g.gathered = Buffer();
  }
  void poll() override {
    for (Unit& g : units_) {
      if (g.pending) g.pending->test();
    }
  }
  // ZeRO-3: start gathering unit `unit`'s bf16 weights (2 bytes per parameter over dp).
  void prefetch(int unit) override {
    if (stage_ != 3 || unit < 0 || unit >= static_cast<int>(units_.size())) return;
    Unit& g = units_[unit];
    if (g.bound || g.gathered.count() > 0) return;
    const Bucket& b = plan_.buckets()[plan_.bucket_of_unit(unit)];
    g.gathered = Buffer(tracker_, MemoryCategory::parameters, DType::bf16, b.chunk * plan_.ranks());
    g.pending = dp_.start_all_gather(copy_.view(b.shard_offset, {b.chunk}), g.gathered.flat());
  }
  void finish_step() override { refresh(); }
  const bf16* bf16_weights(const float* fp32, int64_t count) const override {
    for (size_t u = 0; u < units_.size(); ++u) {
      const Unit& g = units_[u];
      if (!g.bound) continue;
      const float* begin = static_cast<const float*>(g.widened.raw());
      const int64_t size = static_cast<int64_t>(g.widened.count());
      if (fp32 < begin || fp32 + count > begin + size) continue;
      const bf16* source = stage_ == 3 ? static_cast<const bf16*>(g.gathered.raw())
                                       : static_cast<const bf16*>(copy_.raw()) +
                                             params_.unit_range(static_cast<int>(u)).begin;
      return source + (fp32 - begin);
    }
    return nullptr;
  }

  void init(uint64_t seed) override {
    // Initialise a full fp32 temporary (values keyed by tensor and element), keep the master.
    Buffer full(tracker_, MemoryCategory::workspace, DType::f32, params_.table().total_elements());
    const size_t elem = dtype_size(DType::f32);
    for (int u = 0; u < params_.num_units(); ++u) {
      params_.bind_parameters(u,
                              static_cast<char*>(full.raw()) + params_.unit_range(u).begin * elem);
    }
    params_.init(seed);
    for (int u = 0; u < params_.num_units(); ++u) params_.bind_parameters(u, nullptr);
    load_full(full);
  }
  void gather_full(const Buffer& full) override {
    if (stage_ == 0) return be_.copy(full.flat(), master_.flat());
    gather_shards(dp_, be_, tracker_, plan_, master_, full, MemoryCategory::workspace);
  }
  void load_full(const Buffer& full) override {
    if (stage_ == 0) {
      be_.copy(master_.flat(), full.flat());
    } else {
      take_shard(be_, plan_, full, master_);
    }
    refresh();
  }

 private:
  struct Unit {
    Buffer gathered;  // ZeRO-3: the unit's bf16 weights from every rank (padded: chunk * n)
    Buffer widened;   // fp32 values of the bf16 weights, bound to the model while in use
    comm::Handle pending;
    bool bound = false;
  };

  // copy = bf16(master), whole or as this rank's shard; ZeRO-1/2 then all-gather the rounded
  // shards (bf16 over dp: half the bytes of gathering the fp32 master).
  void refresh() {
    if (stage_ == 0 || stage_ == 3) return be_.copy(copy_.flat(), master_.flat());
    Buffer shard(tracker_, MemoryCategory::workspace, DType::bf16, plan_.shard_elements());
    be_.copy(shard.flat(), master_.flat());
    gather_shards(dp_, be_, tracker_, plan_, shard, copy_, MemoryCategory::workspace);
  }

  int stage_;
  ParameterSet& params_;
  comm::Communicator& dp_;
  Backend& be_;
  MemoryTracker& tracker_;
  const BucketPlan& plan_;
  Buffer master_;  // fp32: the whole table (stage 0) or this rank's shard
  Buffer copy_;    // bf16: the whole table (stages 0-2) or this rank's shard (stage 3)
  std::vector<Unit> units_;
};

}  // namespace

std::unique_ptr<ParameterStore> make_mixed_precision_store(int stage, ParameterSet& params,
                                                           comm::Communicator& dp, Backend& be,
                                                           MemoryTracker& tracker,
                                                           const BucketPlan& plan) {
  TRILLION_CHECK(stage >= 0 && stage <= 3, "ZeRO stage must be 0..3");
  return std::make_unique<MixedPrecisionWeights>(stage, params, dp, be, tracker, plan);
}

}  // namespace trillion::parallel
