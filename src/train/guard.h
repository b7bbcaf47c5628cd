// Step guards: whether a step's update may be applied. A non-finite loss or gradient norm, or
// (with guard.spike_zscore > 0) a loss that many standard deviations above the mean of the last
// accepted losses, skips the update: parameters and optimizer state stay as they were. Every
// rank judges the same all-reduced loss and norm (a NaN anywhere reaches every rank through the
// reductions that already run), so the decision is the same on all ranks of a replica without
// an extra collective. guard.max_skips consecutive skips mean the run has diverged: the trainer
// rolls back to the newest checkpoint or stops with an error (on_divergence).
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include "train/run_config.h"

namespace trillion {

enum class StepVerdict { kAccept, kNonFinite, kSpike };

class StepGuard {
 public:
  explicit StepGuard(const GuardConfig& config) : config_(config) {}

  StepVerdict judge(double loss, double grad_norm) const;
  // After the step: accepted losses join the spike window; skips extend the streak.
  void record(StepVerdict verdict, double loss);

  int64_t consecutive_skips() const { return consecutive_skips_; }
  int64_t total_skips() const { return total_skips_; }
  bool diverged() const { return consecutive_skips_ >= config_.max_skips; }
  void clear_streak() { consecutive_skips_ = 0; }
  // "loss nan (not finite)", "loss 9.1 is 12.0 standard deviations above the last 50 steps'".
  std::string explain(StepVerdict verdict, double loss, double grad_norm) const;

 private:
  double mean() const;
  double stddev() const;

  GuardConfig config_;
  std::deque<double> window_;
  int64_t consecutive_skips_ = 0, total_skips_ = 0;
};

std::string_view verdict_name(StepVerdict v);  // "accepted", "non_finite", "spike"

}  // namespace trillion
