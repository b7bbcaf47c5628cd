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

// The shrink case (a failed host out for a repair, issue 34): waiting adds the repair to each
// failure's loss; running elastic at speed s adds repair x (1 - s) + one more restart, and each
// failure takes the cheaper. By hand, M = 36000 s, restart 600 s, repair 2 h = 7200 s:
// waiting 7200 s; elastic at s = 0.75: 7200 x 0.25 + 600 = 2400 s; at s = 0.05: 7440 s, so wait.
TEST(Failures, AHostOutForRepairCostsTheCheaperOfWaitingAndShrinking) {
  FailureInputs in;
  in.gpus = 1000;
  in.failures_per_gpu_hour = 1e-4;
  in.checkpoint_seconds = 30;
  in.restart_seconds = 600;
  in.ideal_seconds = 100 * 3600;
  const FailureEstimate spare = estimate_failures(in);
  const double tau = spare.checkpoint_interval;
  EXPECT_DOUBLE_EQ(spare.lost_per_failure, 600 + (tau + 30) / 2);
  in.host_repair_seconds = 7200;
  const FailureEstimate wait = estimate_failures(in);
  EXPECT_FALSE(wait.elastic);
  EXPECT_DOUBLE_EQ(wait.repair_cost, 7200);
  EXPECT_DOUBLE_EQ(wait.lost_per_failure, 600 + (tau + 30) / 2 + 7200);
  const double wall = in.ideal_seconds * (1 + 30 / tau) / (1 - wait.lost_per_failure / 36000);
  EXPECT_NEAR(wait.wall_seconds, wall, 1e-6 * wall);
  EXPECT_NEAR(in.ideal_seconds + wait.checkpoint_overhead + wait.rework_overhead +
                  wait.restart_overhead + wait.repair_overhead,
              wait.wall_seconds, 1e-6 * wall);
  in.shrunk_speed = 0.75;
  const FailureEstimate shrink = estimate_failures(in);
  EXPECT_TRUE(shrink.elastic);
  EXPECT_DOUBLE_EQ(shrink.repair_cost, 2400);
  EXPECT_GT(shrink.goodput, wait.goodput);
  EXPECT_LT(shrink.goodput, spare.goodput);
  in.shrunk_speed = 0.05;
  EXPECT_FALSE(estimate_failures(in).elastic);
  EXPECT_DOUBLE_EQ(estimate_failures(in).repair_cost, 7200);
  // A repair longer than the MTBF: waiting never finishes, shrinking does.
  in.host_repair_seconds = 40000;
  in.shrunk_speed = 0;
  EXPECT_EQ(estimate_failures(in).goodput, 0);
  in.shrunk_speed = 0.75;
  EXPECT_GT(estimate_failures(in).goodput, 0);
}

// The replicas launch --elastic keeps: a host of 8 GPUs takes 8 / (tp pp cp) replicas (at least
// one), and of the rest the largest count that splits the step's micro-batches (and whose
// positions ep divides).
TEST(Failures, ElasticReplicasFollowTheEnginesRule) {
  EXPECT_EQ(elastic_replicas(128, 1, 1, 128, 8, 2048), 64);  // Llama 3 405B: 127 -> 64
  EXPECT_EQ(elastic_replicas(128, 1, 1, 128, 8, 2048 * 127), 127);
  EXPECT_EQ(elastic_replicas(64, 1, 1, 2, 8, 96), 48);  // tp 2: a host holds 4 replicas
  EXPECT_EQ(elastic_replicas(4, 1, 1, 1, 1, 8), 2);     // the engine's drill: dp 4 -> 2
  EXPECT_EQ(elastic_replicas(4, 1, 1, 1, 1, 6), 3);     // dp 3 where the batch divides
  EXPECT_EQ(elastic_replicas(8, 1, 4, 1, 1, 56), 4);    // 7 divides 56, but ep 4 does not
  EXPECT_EQ(elastic_replicas(1, 1, 1, 8, 8, 16), 0);    // nothing left
}

}  // namespace
}  // namespace trillion::plan
