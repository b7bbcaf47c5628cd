// LAMB (You et al. 1904.00962, Algorithm 2, with Adam's bias correction as in NVIDIA's FusedLAMB):
// the AdamW direction u = m_hat / (sqrt(v_hat) + eps) + wd * w, scaled per tensor by the trust
// ratio ||w|| / ||u|| (1 when either norm is 0), then w -= lr * ratio * u. Layer-wise adaptivity
// is what lets LAMB keep large-batch training stable.
//
// Under ZeRO a tensor's elements are spread over ranks, so the two norms are sums of per-rank
// partial sums: step() computes this rank's partial sums of squares for every tensor, adds them
// across ranks with the SumAcrossRanks callback (one all-reduce of 2 doubles per tensor), and only
// then applies the update. With the callback as identity (one process) the result is the textbook
// per-tensor LAMB. Reference implementation on the host for f32/f64 buffers.
#pragma once

#include "optim/adamw.h"

namespace trillion {

class Lamb : public Optimizer {
 public:
  Lamb(const TensorTable& table, std::vector<OptimSegment> segments, int64_t state_elements,
       DType dtype, const AdamWConfig& config, MemoryTracker& tracker, SumAcrossRanks sum);
  void step(const Buffer& params, const Buffer& grads, double lr) override;
  int64_t steps_taken() const override { return step_; }
  void set_steps_taken(int64_t s) override { step_ = s; }
  Buffer& first_moment() override { return m_; }
  Buffer& second_moment() override { return v_; }
  // Trust ratios of the last step, per table tensor (tests and diagnostics).
  const std::vector<double>& trust_ratios() const { return ratios_; }

 private:
  const TensorTable& table_;
  std::vector<OptimSegment> segments_;
  AdamWConfig config_;
  Buffer m_, v_;
  SumAcrossRanks sum_;
  std::vector<double> ratios_;
  int64_t step_ = 0;
};

}  // namespace trillion
