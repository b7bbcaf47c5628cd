// See failures.h.
#include "plan/failures.h"

#include <fmt/format.h>

#include <algorithm>
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
  if (in.host_repair_seconds > 0) {
    f.repair_cost = in.host_repair_seconds;
    const double shrunk =
        in.host_repair_seconds * (1 - std::min(1.0, in.shrunk_speed)) + in.restart_seconds;
    if (in.shrunk_speed > 0 && shrunk < f.repair_cost) {
      f.repair_cost = shrunk;
      f.elastic = true;
    }
  }
  const double lost_per_failure = in.restart_seconds + (tau + delta) / 2 + f.repair_cost;
  f.lost_per_failure = lost_per_failure;
  const double denom = 1 - lost_per_failure / f.mtbf_seconds;
  if (denom <= 0.01) {
    f.wall_seconds = INFINITY;
    f.goodput = 0;
    f.expected_interruptions = INFINITY;
    if (f.repair_cost > 0) f.repair_overhead = INFINITY;
    return f;
  }
  f.wall_seconds = in.ideal_seconds * (1 + delta / tau) / denom;
  f.expected_interruptions = f.wall_seconds / f.mtbf_seconds;
  f.goodput = in.ideal_seconds / f.wall_seconds;
  f.checkpoint_overhead = in.ideal_seconds * delta / tau;
  f.restart_overhead = f.expected_interruptions * in.restart_seconds;
  f.rework_overhead = f.expected_interruptions * (tau + delta) / 2;
  f.repair_overhead = f.expected_interruptions * f.repair_cost;
  return f;
}

int elastic_replicas(int dp, int cp, int ep, long replica_gpus, int host_gpus,
                     int64_t micro_batches) {
  const long lost = std::max<long>(1, host_gpus / std::max<long>(1, replica_gpus));
  for (long d = dp - lost; d >= 1; --d) {
    if (micro_batches % d == 0 && (d * cp) % ep == 0) return static_cast<int>(d);
  }
  return 0;
}

}  // namespace trillion::plan
