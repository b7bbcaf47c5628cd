// AdamW over a model's flat buffers: first and second moments in flat buffers with the same
// TensorTable layout as the parameters (optimizer memory = 2 * params * element size), weight
// decay only on tensors whose spec says so (not on norms). Also the global gradient-norm clip.
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "core/tensor_table.h"

namespace trillion {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

class AdamW {
 public:
  AdamW(const TensorTable& table, DType dtype, const AdamWConfig& config, Backend& backend,
        MemoryTracker& tracker);
  // One update of every parameter with learning rate lr; increments the step count.
  void step(const Buffer& params, const Buffer& grads, double lr);
  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t s) { step_ = s; }
  Buffer& first_moment() { return m_; }
  Buffer& second_moment() { return v_; }

 private:
  const TensorTable& table_;
  AdamWConfig config_;
  Backend& be_;
  Buffer m_, v_;
  int64_t step_ = 0;
};

// L2 norm of all gradients (computed in double). If max_norm > 0 and the norm exceeds it, scales
// the gradients by max_norm / norm. Returns the norm before clipping.
double clip_grad_norm(Backend& backend, const Buffer& grads, double max_norm);

}  // namespace trillion
