// See bf16_gradients.h.
#include "parallel/bf16_gradients.h"

#include <cstring>
#include <type_traits>
#include <vector>

#include "core/error.h"

namespace trillion::parallel {

namespace {

bf16* bf16_data(const Buffer& b, int64_t offset = 0) {
  return static_cast<bf16*>(b.raw()) + offset;
}

double sum_squares_bf16(const bf16* g, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = bf16_to_float(g[i]);
    s += x * x;
  }
  return s;
}

void scale_bf16(bf16* g, int64_t n, double f) {
  for (int64_t i = 0; i < n; ++i) {
    g[i] = float_to_bf16(static_cast<float>(bf16_to_float(g[i]) * f));
  }
}

// g = bf16(g + x), each sum in fp32 (the bf16 sum's own rule, comm/mpi_communicator.cpp).
template <typename X>
void accumulate_bf16(bf16* g, const X* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float add;
    if constexpr (std::is_same_v<X, bf16>) {
      add = bf16_to_float(x[i]);
    } else {
      add = x[i];
    }
    g[i] = float_to_bf16(bf16_to_float(g[i]) + add);
  }
}

class Bf16Gradients : public GradientStore {
 public:
  Bf16Gradients(int stage, ParameterSet& params, comm::Communicator& dp, Backend& be,
                MemoryTracker& tracker, const BucketPlan& plan)
      : stage_(stage),
        params_(params),
        dp_(dp),
        be_(be),
        tracker_(tracker),
        plan_(plan),
        grads_(tracker, MemoryCategory::gradients, DType::bf16,
               stage <= 1 ? params.table().total_elements() : plan.shard_elements()),
        pieces_(plan.owned_pieces(params.table())),
        accumulators_(plan.buckets().size()),
        rounded_(plan.buckets().size()) {
    TRILLION_CHECK(params.gradients().count() == 0,
                   "bf16 gradients live in their store, not in the model");
  }
  bool sharded() const override { return stage_ >= 2; }
  bool reduces_every_micro_batch() const override { return stage_ >= 2; }
  void begin_step() override { std::memset(grads_.raw(), 0, grads_.bytes()); }  // bf16 +0

  void open(int bucket) override {
    Buffer& acc = accumulators_[bucket];
    if (acc.count() > 0) return;
    const Bucket& b = plan_.buckets()[bucket];
    if (b.size() == 0) return;
    acc = Buffer(tracker_, MemoryCategory::workspace, DType::f32, b.size());
    const size_t elem = dtype_size(DType::f32);
    for (int u = b.first_unit; u <= b.last_unit; ++u) {
      params_.bind_gradients(
          u, static_cast<char*>(acc.raw()) + (params_.unit_range(u).begin - b.begin) * elem);
    }
  }
  void end_micro_batch(int bucket) override {
    Buffer& acc = accumulators_[bucket];
    if (acc.count() == 0) return;
    const Bucket& b = plan_.buckets()[bucket];
    for (int u = b.first_unit; u <= b.last_unit; ++u) params_.bind_gradients(u, nullptr);
    const float* x = static_cast<const float*>(acc.raw());
    if (stage_ <= 1) {
      accumulate_bf16(bf16_data(grads_, b.begin), x, b.size());
    } else {
      // This micro-batch's gradients in bf16, padded to n chunks (zeros), for the reduce-scatter.
      Buffer& r = rounded_[bucket];
      r = Buffer(tracker_, MemoryCategory::gradients, DType::bf16, b.chunk * plan_.ranks());
      be_.copy(r.view(0, {b.size()}), acc.flat());
    }
    acc = Buffer();
  }
  double local_sum_squares(int bucket) override {
    const Bucket& b = plan_.buckets()[bucket];
    if (stage_ <= 1) return sum_squares_bf16(bf16_data(grads_, b.begin), b.size());
    return sum_squares_bf16(bf16_data(rounded_[bucket]), rounded_[bucket].count());
  }
  Reduction start(int bucket) override {
    const Bucket& b = plan_.buckets()[bucket];
    Reduction r;
    r.bucket = bucket;
    if (stage_ == 0) {
      r.handle = dp_.start_all_reduce(grads_.view(b.begin, {b.size()}));
      return r;
    }
    const int64_t padded = b.chunk * plan_.ranks();
    if (stage_ >= 2) {
      TRILLION_CHECK(rounded_[bucket].count() == padded, "bucket reduced before its micro-batch");
      r.input = std::move(rounded_[bucket]);
    } else if (padded != b.size()) {
      r.input = Buffer(tracker_, MemoryCategory::workspace, DType::bf16, padded);  // zeroed
      be_.copy(r.input.view(0, {b.size()}), grads_.view(b.begin, {b.size()}));
    }
    // ZeRO-1 reduce-scatters the kept gradients in place when the bucket needs no padding.
    const Tensor input = r.input.count() > 0 ? r.input.flat() : grads_.view(b.begin, {b.size()});
    r.output = Buffer(tracker_, MemoryCategory::gradients, DType::bf16, b.chunk);
    r.handle = dp_.start_reduce_scatter(input, r.output.flat());
    return r;
  }
  void complete(Reduction& r) override {
    if (stage_ == 0) return;
    const Bucket& b = plan_.buckets()[r.bucket];
    if (stage_ == 1) {
      const int64_t lo = b.owned_begin(plan_.rank()), hi = b.owned_end(plan_.rank());
      if (hi > lo) be_.copy(grads_.view(lo, {hi - lo}), r.output.view(0, {hi - lo}));
      return;
    }
    accumulate_bf16(bf16_data(grads_, b.shard_offset), bf16_data(r.output), b.chunk);
  }
  const Buffer& optimizer_grads() override { return grads_; }
  double sum_squares() override {
    if (stage_ == 0) return sum_squares_bf16(bf16_data(grads_), grads_.count());
    if (stage_ >= 2) return sum_squares_bf16(bf16_data(grads_), grads_.count());  // padding 0
    double s = 0;
    for (const OwnedPiece& p : pieces_)
      s += sum_squares_bf16(bf16_data(grads_, p.global), p.length);
    return s;
  }
  void scale(double f) override {
    if (stage_ != 1) return scale_bf16(bf16_data(grads_), grads_.count(), f);
    for (const OwnedPiece& p : pieces_) scale_bf16(bf16_data(grads_, p.global), p.length, f);
  }

 private:
  int stage_;
  ParameterSet& params_;
  comm::Communicator& dp_;
  Backend& be_;
  MemoryTracker& tracker_;
  const BucketPlan& plan_;
  Buffer grads_;  // bf16: the whole table (stages 0-1) or this rank's shard (2-3)
  std::vector<OwnedPiece> pieces_;
  std::vector<Buffer> accumulators_;  // per bucket: fp32 gradients of the micro-batch in progress
  std::vector<Buffer> rounded_;       // stages 2-3, per bucket: bf16 input of its reduce-scatter
};

}  // namespace

std::unique_ptr<GradientStore> make_bf16_gradient_store(int stage, ParameterSet& params,
                                                        comm::Communicator& dp, Backend& be,
                                                        MemoryTracker& tracker,
                                                        const BucketPlan& plan) {
  TRILLION_CHECK(stage >= 0 && stage <= 3, "ZeRO stage must be 0..3");
  return std::make_unique<Bf16Gradients>(stage, params, dp, be, tracker, plan);
}

}  // namespace trillion::parallel
