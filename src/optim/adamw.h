// AdamW (Loshchilov & Hutter 1711.05101) over a model's flat buffers: first and second moments
// in flat buffers of the segments' state layout (optimizer memory = 2 * elements * element size;
// a ZeRO shard holds 1/n of them), weight decay only on tensors whose spec says so (not on
// norms). Also the one-process global gradient-norm clip.
#pragma once

#include <cstdint>

#include "optim/optimizer.h"

namespace trillion {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

class AdamW : public Optimizer {
 public:
  // The whole table (one process).
  AdamW(const TensorTable& table, DType dtype, const AdamWConfig& config, Backend& backend,
        MemoryTracker& tracker);
  // The given segments, with state_elements elements of state per moment.
  AdamW(const TensorTable& table, std::vector<OptimSegment> segments, int64_t state_elements,
        DType dtype, const AdamWConfig& config, Backend& backend, MemoryTracker& tracker);
  void step(const Buffer& params, const Buffer& grads, double lr) override;
  int64_t steps_taken() const override { return step_; }
  void set_steps_taken(int64_t s) override { step_ = s; }
  Buffer& first_moment() override { return m_; }
  Buffer& second_moment() override { return v_; }

 private:
  const TensorTable& table_;
  std::vector<OptimSegment> segments_;
  AdamWConfig config_;
  Backend& be_;
  Buffer m_, v_;
  int64_t step_ = 0;
};

// L2 norm of all gradients (computed in double). If max_norm > 0 and the norm exceeds it, scales
// the gradients by max_norm / norm. Returns the norm before clipping.
double clip_grad_norm(Backend& backend, const Buffer& grads, double max_norm);

}  // namespace trillion
