// See sgd.h. Host loops (the CPU backend's memory), in the parameter dtype.
#include "optim/sgd.h"

#include <fmt/format.h>

#include "core/error.h"

namespace trillion {

Sgd::Sgd(const TensorTable& table, std::vector<OptimSegment> segments, int64_t state_elements,
         DType dtype, const SgdConfig& config, MemoryTracker& tracker)
    : table_(table),
      segments_(std::move(segments)),
      config_(config),
      m_(tracker, MemoryCategory::optimizer, dtype, config.momentum > 0 ? state_elements : 0) {
  if (dtype != DType::f32 && dtype != DType::f64) {
    throw Error("optim.name = 'sgd' needs model.dtype f32 or f64");
  }
  if (!(config.momentum >= 0 && config.momentum < 1)) {
    throw Error(
        fmt::format("optim.beta1 = {} (the SGD momentum) must be in [0, 1)", config.momentum));
  }
}

namespace {

template <typename T>
void sgd_segment(const Buffer& params, const Buffer& grads, const Buffer& m_buf,
                 const OptimSegment& seg, double lr, double wd, double beta) {
  T* w = static_cast<T*>(params.raw()) + seg.param_offset;
  const T* g = static_cast<const T*>(grads.raw()) + seg.grad_offset;
  T* m = beta > 0 ? static_cast<T*>(m_buf.raw()) + seg.state_offset : nullptr;
  const T b = static_cast<T>(beta), step = static_cast<T>(lr), decay = static_cast<T>(wd);
  for (int64_t i = 0; i < seg.length; ++i) {
    T d = g[i];
    if (m != nullptr) d = m[i] = b * m[i] + g[i];
    w[i] -= step * (d + decay * w[i]);
  }
}

}  // namespace

void Sgd::step(const Buffer& params, const Buffer& grads, double lr) {
  ++step_;
  for (const OptimSegment& seg : segments_) {
    const double wd = table_.spec(seg.spec).weight_decay ? config_.weight_decay : 0.0;
    if (params.dtype() == DType::f64) {
      sgd_segment<double>(params, grads, m_, seg, lr, wd, config_.momentum);
    } else {
      sgd_segment<float>(params, grads, m_, seg, lr, wd, config_.momentum);
    }
  }
}

}  // namespace trillion
