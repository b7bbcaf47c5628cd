// See adamw.h.
#include "optim/adamw.h"

#include <cmath>

namespace trillion {

AdamW::AdamW(const TensorTable& table, DType dtype, const AdamWConfig& config, Backend& backend,
             MemoryTracker& tracker)
    : table_(table), config_(config), be_(backend),
      m_(tracker, MemoryCategory::optimizer, dtype, table.total_elements()),
      v_(tracker, MemoryCategory::optimizer, dtype, table.total_elements()) {}

void AdamW::step(const Buffer& params, const Buffer& grads, double lr) {
  ++step_;
  for (int i = 0; i < static_cast<int>(table_.specs().size()); ++i) {
    const TensorSpec& spec = table_.spec(i);
    AdamWParams p{lr, config_.beta1, config_.beta2, config_.eps,
                  spec.weight_decay ? config_.weight_decay : 0.0, step_};
    auto flat = [&](const Buffer& b) { return b.view(spec.offset, {spec.numel()}); };
    be_.adamw_update(flat(params), flat(grads), flat(m_), flat(v_), p);
  }
}

double clip_grad_norm(Backend& backend, const Buffer& grads, double max_norm) {
  const double norm = std::sqrt(backend.sum_squares(grads.flat()));
  if (max_norm > 0 && norm > max_norm) backend.scale(grads.flat(), max_norm / norm);
  return norm;
}

}  // namespace trillion
