// See lamb.h. Two passes over the segments: (1) update the moments and accumulate this rank's
// sums of squares of w and u per tensor; (2) after the sums are added across ranks, recompute u
// from the updated moments and apply the trust-ratio-scaled step (w is unchanged until pass 2, so
// u is the same both times and no buffer for u is needed).
#include "optim/lamb.h"

#include <cmath>

#include "core/error.h"

namespace trillion {

Lamb::Lamb(const TensorTable& table, std::vector<OptimSegment> segments, int64_t state_elements,
           DType dtype, const AdamWConfig& config, MemoryTracker& tracker, SumAcrossRanks sum)
    : table_(table),
      segments_(std::move(segments)),
      config_(config),
      m_(tracker, MemoryCategory::optimizer, dtype, state_elements),
      v_(tracker, MemoryCategory::optimizer, dtype, state_elements),
      sum_(std::move(sum)) {
  if (dtype != DType::f32 && dtype != DType::f64) {
    throw Error("optim.name = 'lamb' needs model.dtype f32 or f64; use adamw for bf16");
  }
}

namespace {

template <typename T>
void lamb_pass(const Buffer& params, const Buffer& grads, const Buffer& m_buf, const Buffer& v_buf,
               const OptimSegment& seg, double wd, const AdamWConfig& c, int64_t step, bool apply,
               double lr_ratio, double* w_sq, double* u_sq) {
  T* w = static_cast<T*>(params.raw()) + seg.param_offset;
  const T* g = static_cast<const T*>(grads.raw()) + seg.grad_offset;
  T* m = static_cast<T*>(m_buf.raw()) + seg.state_offset;
  T* v = static_cast<T*>(v_buf.raw()) + seg.state_offset;
  const double c1 = 1.0 / (1.0 - std::pow(c.beta1, static_cast<double>(step)));
  const double c2 = 1.0 / (1.0 - std::pow(c.beta2, static_cast<double>(step)));
  double ws = 0, us = 0;
  for (int64_t i = 0; i < seg.length; ++i) {
    if (!apply) {
      m[i] = static_cast<T>(c.beta1 * m[i] + (1 - c.beta1) * g[i]);
      v[i] = static_cast<T>(c.beta2 * v[i] + (1 - c.beta2) * g[i] * g[i]);
    }
    const double u = m[i] * c1 / (std::sqrt(v[i] * c2) + c.eps) + wd * w[i];
    if (apply) {
      w[i] = static_cast<T>(w[i] - lr_ratio * u);
    } else {
      ws += static_cast<double>(w[i]) * w[i];
      us += u * u;
    }
  }
  *w_sq += ws;
  *u_sq += us;
}

}  // namespace

void Lamb::step(const Buffer& params, const Buffer& grads, double lr) {
  ++step_;
  const size_t n_specs = table_.specs().size();
  std::vector<double> sums(2 * n_specs, 0.0);  // [w_sq..., u_sq...] per tensor
  auto pass = [&](bool apply) {
    for (const OptimSegment& seg : segments_) {
      const double wd = table_.spec(seg.spec).weight_decay ? config_.weight_decay : 0.0;
      const double lr_ratio = apply ? lr * ratios_[seg.spec] : 0.0;
      double* w_sq = &sums[seg.spec];
      double* u_sq = &sums[n_specs + seg.spec];
      if (params.dtype() == DType::f32) {
        lamb_pass<float>(params, grads, m_, v_, seg, wd, config_, step_, apply, lr_ratio, w_sq,
                         u_sq);
      } else {
        lamb_pass<double>(params, grads, m_, v_, seg, wd, config_, step_, apply, lr_ratio, w_sq,
                          u_sq);
      }
    }
  };
  pass(false);
  if (sum_) sum_(sums);
  ratios_.assign(n_specs, 1.0);
  for (size_t i = 0; i < n_specs; ++i) {
    const double w_norm = std::sqrt(sums[i]), u_norm = std::sqrt(sums[n_specs + i]);
    if (w_norm > 0 && u_norm > 0) ratios_[i] = w_norm / u_norm;
  }
  pass(true);
}

}  // namespace trillion
