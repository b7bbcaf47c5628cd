// LR schedules at their defining points, and global-norm clipping.
#include <gtest/gtest.h>

#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "test_util.h"

using namespace trillion;

TEST(LrSchedule, WarmupThenCosineToMin) {
  LrSchedule s{LrScheduleKind::cosine, 1.0, 0.1, 10, 110, 0.2};
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.at(9), 1.0);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  EXPECT_NEAR(s.at(60), 0.55, 1e-12);  // half way: mean of peak and min
  EXPECT_NEAR(s.at(110), 0.1, 1e-12);
  EXPECT_NEAR(s.at(500), 0.1, 1e-12);
}

TEST(LrSchedule, WarmupStableDecay) {
  LrSchedule s{LrScheduleKind::wsd, 1.0, 0.0, 5, 100, 0.2};
  EXPECT_DOUBLE_EQ(s.at(50), 1.0);
  EXPECT_DOUBLE_EQ(s.at(80), 1.0);  // decay starts at 100 - 20
  EXPECT_NEAR(s.at(90), 0.5, 1e-12);
  EXPECT_NEAR(s.at(100), 0.0, 1e-12);
  EXPECT_THROW(parse_lr_schedule("linear"), Error);
}

TEST(GradClip, ScalesToTheMaxNormAndReportsTheOriginal) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  Buffer g(tracker, MemoryCategory::gradients, DType::f32, 2);
  static_cast<float*>(g.raw())[0] = 3;
  static_cast<float*>(g.raw())[1] = 4;
  EXPECT_DOUBLE_EQ(clip_grad_norm(*be, g, 1.0), 5.0);
  EXPECT_NEAR(std::sqrt(be->sum_squares(g.flat())), 1.0, 1e-6);
  EXPECT_NEAR(clip_grad_norm(*be, g, 10.0), 1.0, 1e-6);  // below the limit: untouched
}
