// See failures.h.
#include "plan/failures.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"

namespace trillion::plan {

double expected_interruptions(long gpus, double failures_per_gpu_hour, double hours) {
  return static_cast<double>(gpus) * failures_per_gpu_hour * hours;
}

double young_interval(double delta, double mtbf) {
  return std::sqrt(2 * delta * mtbf);
}

double daly_interval(double delta, double mtbf) {
  if (delta >= 2 * mtbf) return mtbf;
  const double x = delta / (2 * mtbf);
  return std::sqrt(2 * delta * mtbf) * (1 + std::sqrt(x) / 3 + x / 9) - delta;
}

IntervalGoodput goodput_at_interval(double mtbf, double tau, double delta, double restart) {
  if (!(mtbf > 0 && tau > 0 && delta >= 0 && restart >= 0)) {
    throw Error(fmt::format("goodput model: MTBF {} s and checkpoint interval {} s must be "
                            "positive, write time {} s and restart time {} s not negative",
                            mtbf, tau, delta, restart));
  }
  IntervalGoodput g;
  g.lost_per_failure = restart + (tau + delta) / 2;
  g.kept = std::max(0.0, 1 - g.lost_per_failure / mtbf);
  g.goodput = g.kept / (1 + delta / tau);
  return g;
}

FailureEstimate estimate_failures(const FailureInputs& in) {
  TRILLION_CHECK(in.gpus > 0 && in.ideal_seconds >= 0, "failure model needs gpus and a duration");
  FailureEstimate f;
  if (in.failures_per_gpu_hour <= 0) {
    f.mtbf_seconds = INFINITY;
    f.checkpoint_interval = in.ideal_seconds;
    f.wall_seconds = in.ideal_seconds + in.checkpoint_seconds;
    f.goodput = in.ideal_seconds / f.wall_seconds;
    return f;
  }
  f.mtbf_seconds = 3600.0 / (in.gpus * in.failures_per_gpu_hour);
  const double delta = std::max(in.checkpoint_seconds, 1e-3);
  const double tau = std::max(daly_interval(delta, f.mtbf_seconds), delta);
  f.checkpoint_interval = tau;
  const double lost_per_failure = in.restart_seconds + (tau + delta) / 2;
  const double denom = 1 - lost_per_failure / f.mtbf_seconds;
  if (denom <= 0.01) {
    f.wall_seconds = INFINITY;
    f.goodput = 0;
    f.expected_interruptions = INFINITY;
    return f;
  }
  f.wall_seconds = in.ideal_seconds * (1 + delta / tau) / denom;
  f.expected_interruptions = f.wall_seconds / f.mtbf_seconds;
  f.goodput = in.ideal_seconds / f.wall_seconds;
  f.checkpoint_overhead = in.ideal_seconds * delta / tau;
  f.restart_overhead = f.expected_interruptions * in.restart_seconds;
  f.rework_overhead = f.expected_interruptions * (tau + delta) / 2;
  return f;
}

}  // namespace trillion::plan
