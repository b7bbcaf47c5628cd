// See guard.h.
#include "train/guard.h"

#include <fmt/format.h>

#include <cmath>

namespace trillion {

namespace {
// fmt prints a NaN with its sign bit ("-nan"); a user wants to read "nan".
std::string number(double v) {
  if (std::isnan(v)) return "nan";
  return fmt::format("{:.6g}", v);
}
}  // namespace

std::string_view verdict_name(StepVerdict v) {
  switch (v) {
    case StepVerdict::kAccept:
      return "accepted";
    case StepVerdict::kNonFinite:
      return "non_finite";
    case StepVerdict::kSpike:
      return "spike";
  }
  return "?";
}

double StepGuard::mean() const {
  double s = 0;
  for (double x : window_) s += x;
  return s / static_cast<double>(window_.size());
}

double StepGuard::stddev() const {
  const double m = mean();
  double s = 0;
  for (double x : window_) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(window_.size() - 1));
}

StepVerdict StepGuard::judge(double loss, double grad_norm) const {
  if (!std::isfinite(loss) || !std::isfinite(grad_norm)) return StepVerdict::kNonFinite;
  // A full window first: the early losses fall fast and would flag nothing or everything.
  if (config_.spike_zscore > 0 && static_cast<int64_t>(window_.size()) == config_.spike_window) {
    const double sd = stddev();
    if (sd > 0 && (loss - mean()) / sd > config_.spike_zscore) return StepVerdict::kSpike;
  }
  return StepVerdict::kAccept;
}

void StepGuard::record(StepVerdict verdict, double loss) {
  if (verdict != StepVerdict::kAccept) {
    ++consecutive_skips_;
    ++total_skips_;
    return;
  }
  consecutive_skips_ = 0;
  window_.push_back(loss);
  if (static_cast<int64_t>(window_.size()) > config_.spike_window) window_.pop_front();
}

std::string StepGuard::explain(StepVerdict verdict, double loss, double grad_norm) const {
  if (verdict == StepVerdict::kNonFinite) {
    return fmt::format("loss {} and gradient norm {}: not finite", number(loss), number(grad_norm));
  }
  if (verdict == StepVerdict::kSpike) {
    return fmt::format(
        "loss {:.4f} is {:.1f} standard deviations above the mean {:.4f} of the "
        "last {} accepted steps (guard.spike_zscore = {})",
        loss, (loss - mean()) / stddev(), mean(), window_.size(), config_.spike_zscore);
  }
  return "accepted";
}

}  // namespace trillion
