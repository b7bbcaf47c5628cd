// SGD with heavy-ball momentum and decoupled weight decay (Loshchilov & Hutter 1711.05101):
//   m <- beta m + g            (beta = 0: plain SGD, no state is read)
//   w <- w - lr (m + wd w)
// Its update is linear in the gradients, which is what makes DiLoCo with H = 1, outer lr 1 and
// no outer momentum exactly synchronous data parallelism (the mean of the islands' updates is the
// update of the mean gradient); AdamW's is not (m / sqrt(v) of a mean is not the mean of
// m / sqrt(v)), so that parity is tested with this optimizer (docs/scale-out.md).
//
// Invariants: one moment buffer (the momentum) in the segments' state layout; second_moment() is
// empty (count 0), which checkpoints write as zeros and do not read back.
#pragma once

#include <cstdint>

#include "optim/optimizer.h"

namespace trillion {

struct SgdConfig {
  double momentum = 0.9;
  double weight_decay = 0.0;
};

class Sgd : public Optimizer {
 public:
  // Error unless 0 <= momentum < 1, or for a dtype other than f32 / f64.
  Sgd(const TensorTable& table, std::vector<OptimSegment> segments, int64_t state_elements,
      DType dtype, const SgdConfig& config, MemoryTracker& tracker);
  void step(const Buffer& params, const Buffer& grads, double lr) override;
  int64_t steps_taken() const override { return step_; }
  void set_steps_taken(int64_t s) override { step_ = s; }
  Buffer& first_moment() override { return m_; }
  Buffer& second_moment() override { return none_; }

 private:
  const TensorTable& table_;
  std::vector<OptimSegment> segments_;
  SgdConfig config_;
  Buffer m_, none_;
  int64_t step_ = 0;
};

}  // namespace trillion
