// Failure model: Young's and Daly's checkpoint intervals, and the goodput accounting.
#include "plan/failures.h"

#include <gtest/gtest.h>

#include <cmath>

namespace trillion::plan {
namespace {

TEST(Failures, YoungAndDalyIntervals) {
  EXPECT_DOUBLE_EQ(young_interval(60, 10800), std::sqrt(2 * 60.0 * 10800));
  // Daly: sqrt(2 d M)(1 + sqrt(d/2M)/3 + d/(18M)) - d.
  const double d = 60, m = 10800, x = d / (2 * m);
  EXPECT_DOUBLE_EQ(daly_interval(d, m), std::sqrt(2 * d * m) * (1 + std::sqrt(x) / 3 + x / 9) - d);
  EXPECT_DOUBLE_EQ(daly_interval(30000, 10000), 10000);  // delta >= 2M: checkpoint every MTBF
  // For small delta/M Daly converges to Young.
  EXPECT_NEAR(daly_interval(1, 1e6) / young_interval(1, 1e6), 1.0, 0.01);
}

TEST(Failures, GoodputAccounting) {
  FailureInputs in;
  in.gpus = 1000;
  in.failures_per_gpu_hour = 1e-4;  // cluster MTBF 10 h
  in.checkpoint_seconds = 30;
  in.restart_seconds = 600;
  in.ideal_seconds = 100 * 3600;
  const FailureEstimate f = estimate_failures(in);
  EXPECT_DOUBLE_EQ(f.mtbf_seconds, 36000);
  const double tau = daly_interval(30, 36000);
  EXPECT_DOUBLE_EQ(f.checkpoint_interval, tau);
  const double wall = in.ideal_seconds * (1 + 30 / tau) / (1 - (600 + (tau + 30) / 2) / 36000);
  EXPECT_NEAR(f.wall_seconds, wall, 1e-6 * wall);
  EXPECT_NEAR(f.goodput, in.ideal_seconds / wall, 1e-12);
  EXPECT_NEAR(f.expected_interruptions, wall / 36000, 1e-9);
  // The overheads add up to the wall-clock time.
  EXPECT_NEAR(in.ideal_seconds + f.checkpoint_overhead + f.rework_overhead + f.restart_overhead,
              f.wall_seconds, 1e-6 * wall);
  // No failures: only the one checkpoint write.
  in.failures_per_gpu_hour = 0;
  EXPECT_NEAR(estimate_failures(in).goodput, 1.0, 1e-4);
}

}  // namespace
}  // namespace trillion::plan
