// Learning-rate schedules as pure functions of the step: linear warmup, then cosine decay to
// min_lr (Loshchilov & Hutter, SGDR) or warmup-stable-decay (WSD: constant, then a linear decay
// over the last decay_fraction of training, as in MiniCPM 2404.06395).
#pragma once

#include <cstdint>
#include <string>

namespace trillion {

enum class LrScheduleKind { constant, cosine, wsd };
LrScheduleKind parse_lr_schedule(const std::string& name);  // throws Error naming the choices

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::cosine;
  double peak_lr = 3e-4;
  double min_lr = 3e-5;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double decay_fraction = 0.2;  // WSD only

  // The learning rate of 0-based step `step` (steps past total_steps stay at the final value).
  double at(int64_t step) const;
};

}  // namespace trillion
