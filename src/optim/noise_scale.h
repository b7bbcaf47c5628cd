// The gradient noise scale (McCandlish, Kaplan, Amodei et al. 1812.06162), estimated while
// training from gradient norms the data-parallel step already has: each rank's (or micro-batch's)
// gradient over B_small examples, and the global one over B_big.
//
// For a gradient estimated from B examples, E|G_B|^2 = |G|^2 + tr(Sigma) / B (Sigma: the
// per-example gradient covariance). Two batch sizes give unbiased estimates of both terms
// (1812.06162 App. A.1):
//   |G|^2    ~ (B_big |G_big|^2 - B_small |G_small|^2) / (B_big - B_small)
//   tr(Sigma) ~ (|G_small|^2 - |G_big|^2) / (1/B_small - 1/B_big)
// where |G_small|^2 is the mean over the small-batch estimates. Each is noisy (the |G|^2 estimate
// can be negative when noise dominates), so both are averaged over steps with an exponential
// moving average before the ratio is taken: B_simple = EMA(tr Sigma) / EMA(|G|^2), the
// prediction of the critical batch size (§2.2): beyond it a larger batch buys few fewer steps.
//
// Invariants: pure (no communication); B_simple is in the units of the batch sizes given (tokens
// if they are token counts); it is "not available" (valid = false) until EMA(|G|^2) > 0.
#pragma once

#include <cstdint>
#include <vector>

namespace trillion {

// One step's measurements.
struct NoiseScaleSample {
  double small_sq_norm = 0;  // mean of |G_small|^2 over the small-batch estimates
  double small_batch = 0;    // B_small (examples or tokens per estimate)
  double big_sq_norm = 0;    // |G_big|^2 of the whole step's gradient
  double big_batch = 0;      // B_big
};

struct NoiseScaleEstimate {
  double gradient_sq = 0, trace = 0;          // this step's unbiased estimates
  double ema_gradient_sq = 0, ema_trace = 0;  // bias-corrected moving averages
  double b_simple = 0;                        // EMA(trace) / EMA(gradient_sq)
  bool valid = false;                         // EMA(gradient_sq) > 0
};

// The step's unbiased estimates; Error if B_big <= B_small or a batch is not positive.
void unbiased_noise_terms(const NoiseScaleSample& s, double* gradient_sq, double* trace);

class NoiseScaleEstimator {
 public:
  // decay: the EMA's beta (0.99 averages over ~100 steps). Error unless 0 <= decay < 1.
  explicit NoiseScaleEstimator(double decay = 0.99);
  NoiseScaleEstimate update(const NoiseScaleSample& s);
  // From the ranks' (or micro-batches') squared gradient norms, each over `per_estimate_batch`,
  // and the squared norm of their mean.
  NoiseScaleEstimate update(const std::vector<double>& small_sq_norms, double per_estimate_batch,
                            double big_sq_norm);
  const NoiseScaleEstimate& last() const { return last_; }

  // The state a checkpoint keeps (so a resumed run continues the same averages).
  struct State {
    double ema_gradient_sq = 0, ema_trace = 0;
    int64_t steps = 0;
  };
  State state() const { return state_; }
  void set_state(const State& s) { state_ = s; }

 private:
  double decay_;
  State state_;
  NoiseScaleEstimate last_;
};

}  // namespace trillion
