// Failure model: Young's and Daly's checkpoint intervals, and the goodput accounting.
#include "plan/failures.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"

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

TEST(Failures, GoodputAtAGivenInterval) {
  // By hand: M = 600 s, a checkpoint every 20 s written in 0.5 s, restart 4 s.
  // lost per failure = 4 + (20 + 0.5)/2 = 14.25 s; kept = 1 - 14.25/600 = 0.97625;
  // goodput = 0.97625 / (1 + 0.5/20) = 0.97625 / 1.025 = 0.952439...
  const IntervalGoodput g = goodput_at_interval(600, 20, 0.5, 4);
  EXPECT_DOUBLE_EQ(g.lost_per_failure, 14.25);
  EXPECT_DOUBLE_EQ(g.kept, 0.97625);
  EXPECT_NEAR(g.goodput, 0.9524390243902439, 1e-15);
  // At Daly's interval it is the goodput estimate_failures reports.
  FailureInputs in;
  in.gpus = 1000;
  in.failures_per_gpu_hour = 1e-4;
  in.checkpoint_seconds = 30;
  in.restart_seconds = 600;
  in.ideal_seconds = 100 * 3600;
  const FailureEstimate f = estimate_failures(in);
  EXPECT_NEAR(goodput_at_interval(f.mtbf_seconds, f.checkpoint_interval, 30, 600).goodput,
              f.goodput, 1e-12);
  // Daly's interval is the best one: half or twice it is worse.
  const double best = f.checkpoint_interval;
  EXPECT_LT(goodput_at_interval(36000, best / 2, 30, 600).goodput, f.goodput);
  EXPECT_LT(goodput_at_interval(36000, best * 2, 30, 600).goodput, f.goodput);
  // A failure that loses more than the MTBF keeps nothing; bad input is an error.
  EXPECT_EQ(goodput_at_interval(10, 20, 1, 5).kept, 0);
  EXPECT_THROW(goodput_at_interval(0, 20, 1, 5), Error);
  EXPECT_THROW(goodput_at_interval(600, 0, 1, 5), Error);
}

}  // namespace
}  // namespace trillion::plan
