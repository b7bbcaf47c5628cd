// See outer_nesterov.h.
#include "optim/outer_nesterov.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace trillion {

OuterNesterov::OuterNesterov(int64_t parameters, const OuterNesterovConfig& config)
    : OuterNesterov(std::span<float>(), config) {
  owned_.assign(static_cast<size_t>(parameters), 0.0f);
  momentum_ = owned_;
}

OuterNesterov::OuterNesterov(std::span<float> momentum, const OuterNesterovConfig& config)
    : config_(config), momentum_(momentum) {
  if (!(config.lr > 0)) {
    throw Error(fmt::format("diloco.outer_lr = {} must be > 0 (DiLoCo uses 0.7)", config.lr));
  }
  if (!(config.momentum >= 0 && config.momentum < 1)) {
    throw Error(fmt::format("diloco.outer_momentum = {} must be in [0, 1) (DiLoCo uses 0.9)",
                            config.momentum));
  }
}

void OuterNesterov::step(std::span<float> params, std::span<const float> delta, int64_t offset) {
  TRILLION_CHECK(params.size() == delta.size(), "outer step: parameters and deltas differ");
  TRILLION_CHECK(offset >= 0 && static_cast<size_t>(offset) + params.size() <= momentum_.size(),
                 "outer step: slice outside the momentum buffer");
  const float lr = static_cast<float>(config_.lr), mu = static_cast<float>(config_.momentum);
  float* v = momentum_.data() + offset;
  for (size_t i = 0; i < params.size(); ++i) {
    v[i] = mu * v[i] + delta[i];
    const float update = config_.nesterov ? delta[i] + mu * v[i] : v[i];
    params[i] -= lr * update;
  }
}

void OuterNesterov::pseudo_gradient(std::span<const float> start, std::span<const float> end,
                                    std::span<float> delta) {
  TRILLION_CHECK(start.size() == end.size() && end.size() == delta.size(),
                 "pseudo-gradient: sizes differ");
  for (size_t i = 0; i < start.size(); ++i) delta[i] = start[i] - end[i];
}

void OuterNesterov::set_momentum(std::span<const float> m) {
  if (m.size() != momentum_.size()) {
    throw Error(fmt::format("outer momentum of {} elements does not fit a model of {} parameters",
                            m.size(), momentum_.size()));
  }
  std::copy(m.begin(), m.end(), momentum_.begin());
}

}  // namespace trillion
