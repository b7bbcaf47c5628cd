// See adamw.h.
#include "optim/adamw.h"

#include <cmath>

namespace trillion {

std::vector<OptimSegment> full_segments(const TensorTable& table) {
  std::vector<OptimSegment> segments;
  for (int i = 0; i < static_cast<int>(table.specs().size()); ++i) {
    const TensorSpec& s = table.spec(i);
    segments.push_back({i, s.offset, s.offset, s.offset, s.numel()});
  }
  return segments;
}

AdamW::AdamW(const TensorTable& table, DType dtype, const AdamWConfig& config, Backend& backend,
             MemoryTracker& tracker)
    : AdamW(table, full_segments(table), table.total_elements(), dtype, config, backend, tracker) {}

AdamW::AdamW(const TensorTable& table, std::vector<OptimSegment> segments, int64_t state_elements,
             DType dtype, const AdamWConfig& config, Backend& backend, MemoryTracker& tracker)
    : table_(table),
      segments_(std::move(segments)),
      config_(config),
      be_(backend),
      m_(tracker, MemoryCategory::optimizer, dtype, state_elements),
      v_(tracker, MemoryCategory::optimizer, dtype, state_elements) {}

void AdamW::step(const Buffer& params, const Buffer& grads, double lr) {
  ++step_;
  for (const OptimSegment& seg : segments_) {
    const TensorSpec& spec = table_.spec(seg.spec);
    AdamWParams p{lr,
                  config_.beta1,
                  config_.beta2,
                  config_.eps,
                  spec.weight_decay ? config_.weight_decay : 0.0,
                  step_};
    be_.adamw_update(
        params.view(seg.param_offset, {seg.length}), grads.view(seg.grad_offset, {seg.length}),
        m_.view(seg.state_offset, {seg.length}), v_.view(seg.state_offset, {seg.length}), p);
  }
}

double clip_grad_norm(Backend& backend, const Buffer& grads, double max_norm) {
  const double norm = std::sqrt(backend.sum_squares(grads.flat()));
  if (max_norm > 0 && norm > max_norm) backend.scale(grads.flat(), max_norm / norm);
  return norm;
}

}  // namespace trillion
