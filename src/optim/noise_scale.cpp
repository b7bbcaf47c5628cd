// See noise_scale.h.
#include "optim/noise_scale.h"

#include <fmt/format.h>

#include <cmath>
#include <numeric>

#include "core/error.h"

namespace trillion {

void unbiased_noise_terms(const NoiseScaleSample& s, double* gradient_sq, double* trace) {
  if (!(s.small_batch > 0) || !(s.big_batch > s.small_batch)) {
    throw Error(fmt::format(
        "gradient noise scale needs 0 < B_small < B_big, got B_small = {} and B_big = {} (one "
        "data-parallel rank and one micro-batch per step measure nothing: the small and big "
        "batch are the same)",
        s.small_batch, s.big_batch));
  }
  *gradient_sq = (s.big_batch * s.big_sq_norm - s.small_batch * s.small_sq_norm) /
                 (s.big_batch - s.small_batch);
  *trace = (s.small_sq_norm - s.big_sq_norm) / (1 / s.small_batch - 1 / s.big_batch);
}

NoiseScaleEstimator::NoiseScaleEstimator(double decay) : decay_(decay) {
  if (!(decay >= 0 && decay < 1)) {
    throw Error(fmt::format("noise scale EMA decay {} must be in [0, 1)", decay));
  }
}

NoiseScaleEstimate NoiseScaleEstimator::update(const NoiseScaleSample& s) {
  NoiseScaleEstimate e;
  unbiased_noise_terms(s, &e.gradient_sq, &e.trace);
  state_.ema_gradient_sq = decay_ * state_.ema_gradient_sq + (1 - decay_) * e.gradient_sq;
  state_.ema_trace = decay_ * state_.ema_trace + (1 - decay_) * e.trace;
  state_.steps += 1;
  // Bias correction (as Adam's): the averages start at zero. It cancels in the ratio.
  const double correction = 1 - std::pow(decay_, static_cast<double>(state_.steps));
  e.ema_gradient_sq = state_.ema_gradient_sq / correction;
  e.ema_trace = state_.ema_trace / correction;
  e.valid = e.ema_gradient_sq > 0;
  e.b_simple = e.valid ? e.ema_trace / e.ema_gradient_sq : 0;
  last_ = e;
  return e;
}

NoiseScaleEstimate NoiseScaleEstimator::update(const std::vector<double>& small_sq_norms,
                                               double per_estimate_batch, double big_sq_norm) {
  if (small_sq_norms.size() < 2) {
    throw Error(fmt::format(
        "gradient noise scale needs at least two small-batch gradients per step, got {}",
        small_sq_norms.size()));
  }
  const double n = static_cast<double>(small_sq_norms.size());
  NoiseScaleSample s;
  s.small_sq_norm = std::accumulate(small_sq_norms.begin(), small_sq_norms.end(), 0.0) / n;
  s.small_batch = per_estimate_batch;
  s.big_sq_norm = big_sq_norm;
  s.big_batch = per_estimate_batch * n;
  return update(s);
}

}  // namespace trillion
