// See lr_schedule.h.
#include "optim/lr_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace trillion {

LrScheduleKind parse_lr_schedule(const std::string& name) {
  if (name == "constant") return LrScheduleKind::constant;
  if (name == "cosine") return LrScheduleKind::cosine;
  if (name == "wsd") return LrScheduleKind::wsd;
  throw Error(fmt::format("optim.schedule = '{}': expected constant, cosine or wsd", name));
}

double LrSchedule::at(int64_t step) const {
  if (step < warmup_steps) return peak_lr * static_cast<double>(step + 1) / warmup_steps;
  const int64_t s = std::min(step, total_steps);
  switch (kind) {
    case LrScheduleKind::constant:
      return peak_lr;
    case LrScheduleKind::cosine: {
      const double span = std::max<int64_t>(1, total_steps - warmup_steps);
      const double progress = static_cast<double>(s - warmup_steps) / span;
      return min_lr + 0.5 * (peak_lr - min_lr) * (1 + std::cos(std::numbers::pi * progress));
    }
    case LrScheduleKind::wsd: {
      const int64_t decay_steps =
          std::max<int64_t>(1, static_cast<int64_t>(std::llround(decay_fraction * total_steps)));
      const int64_t decay_start = std::max(warmup_steps, total_steps - decay_steps);
      if (s < decay_start) return peak_lr;
      const double progress =
          static_cast<double>(s - decay_start) / std::max<int64_t>(1, total_steps - decay_start);
      return peak_lr + (min_lr - peak_lr) * progress;
    }
  }
  return peak_lr;
}

}  // namespace trillion
