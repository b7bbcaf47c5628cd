// See bench_attention_buffers.h. Allocation order (qkv, out, dout, dqkv) is the tracker's order.
#include "cli/bench_attention_buffers.h"

#include <vector>

#include "core/philox.h"

namespace trillion::cli {

AttentionBenchBuffers::AttentionBenchBuffers(Backend& backend, MemoryTracker& tracker,
                                             const AttentionShape& s, uint64_t seed,
                                             std::string_view purpose)
    : rows_(s.B * s.T),
      width_(s.qkv_width()),
      heads_width_(s.out_width()),
      qkv_(tracker, MemoryCategory::activations, DType::f32, rows_ * width_),
      out_(tracker, MemoryCategory::activations, DType::f32, rows_ * heads_width_),
      dout_(tracker, MemoryCategory::activations, DType::f32, rows_ * heads_width_),
      dqkv_(tracker, MemoryCategory::activations, DType::f32, rows_ * width_) {
  std::vector<float> init(rows_ * width_);
  const Philox rng(seed, purpose);
  for (int64_t i = 0; i < rows_ * width_; ++i) init[i] = static_cast<float>(rng.normal(i));
  backend.copy(qkv_.flat(), Tensor(init.data(), DType::f32, {rows_ * width_}));
  backend.copy(dout_.flat(), Tensor(init.data(), DType::f32, {rows_ * heads_width_}));
}

}  // namespace trillion::cli
