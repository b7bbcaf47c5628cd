// Calibration and validation against published runs (plan/published_runs.h). The A100's one
// calibrated constant, its large-GEMM efficiency, is the value that fits Narayanan et al.
// 2104.04473 Table 1 best (refitted here), and with it every Table 1 row is within 10%; the
// other runs were not used to choose anything: Llama 3 405B Table 4 within 4 MFU points with
// memory under 80 GB, Narayanan's Table 2 PTD rows, Korthikanti's 530B with full and with
// selective recompute, MT-NLG 530B on 2,240-3,360 A100 40GB (DeepSpeed's 1F1B pipeline) and
// BLOOM 176B, each within its tolerance.
#include <gtest/gtest.h>

#include <cmath>

#include "plan/efficiency.h"
#include "plan/published_runs.h"

namespace trillion::plan {
namespace {

// Hopper's block-scaled FP8 GEMMs (1x128 activation tiles, 128x128 weight blocks, promotion to
// fp32 on CUDA cores every 128 of K) against DeepGEMM's published H800 table (README, Feb 2025):
// the cluster file's fp8_gemm 0.735 and K overhead 720 put every training-sized shape within
// 3%, grouped (MoE) ones included; BF16's constants would be 13% high at K = 2048.
TEST(Calibration, HopperFp8GemmsMatchDeepGemmsPublishedTable) {
  struct Shape {
    double m, n, k, groups, tflops;
  };
  const Gpu& h800 = find_gpu("h800");
  for (const Shape& s : {Shape{4096, 2112, 7168, 1, 1058}, Shape{4096, 24576, 1536, 1, 990},
                         Shape{4096, 32768, 512, 1, 590}, Shape{4096, 7168, 16384, 1, 1358},
                         Shape{4096, 4096, 7168, 1, 1304}, Shape{4096, 7168, 2048, 1, 1025},
                         Shape{8192, 4096, 7168, 4, 1297}, Shape{8192, 7168, 2048, 4, 1099},
                         Shape{4096, 4096, 7168, 8, 1288}, Shape{4096, 7168, 2048, 8, 1093}}) {
    const double seconds =
        gemm_seconds(h800, Precision::kFp8, s.m, s.n, s.k, s.groups, /*elem_bytes=*/1);
    const double tflops = 2 * s.m * s.n * s.k * s.groups / seconds / 1e12;
    EXPECT_NEAR(tflops / s.tflops, 1.0, 0.03) << s.m << "x" << s.n << "x" << s.k;
  }
  // The 16-bit constants (0.64, K + 128) on FP8's peak at K = 2048 would say 1156 TFLOP/s.
  EXPECT_GT(gemm_fraction(h800, 4096, 7168, 2048) * h800.fp8_flops / 1e12, 1.1 * 1025);
}

TEST(Calibration, NarayananTable1EveryRowWithinTenPercent) {
  int rows = 0;
  for (const PublishedRun& run : published_runs()) {
    if (!run.calibration) continue;
    ++rows;
    const RunCheck c = check_run(run);
    EXPECT_LE(std::fabs(c.error), 0.10)
        << run.name << ": predicted " << c.predicted << " TFLOP/s, published " << run.published;
    // The published layout is what was planned: TP, PP and the 2021 recipe.
    const Layout& l = c.plan.best().layout;
    EXPECT_EQ(l.tp, run.inputs.search.fixed.tp) << run.name;
    EXPECT_EQ(l.pp, run.inputs.search.fixed.pp) << run.name;
    EXPECT_EQ(l.recompute, Recompute::kFull) << run.name;
    EXPECT_FALSE(l.sequence_parallel()) << run.name;
    if (l.pp > 1) {
      EXPECT_EQ(l.schedule, schedule::ScheduleKind::kInterleaved) << run.name;
    }
    EXPECT_LT(c.plan.best().step.memory.total(), 80e9) << run.name;
  }
  EXPECT_EQ(rows, 10);
}

// Refit the one constant: the large-GEMM efficiency minimising the squared log error over
// Table 1 is the a100 cluster file's value (to the grid's 0.01).
TEST(Calibration, TheA100GemmEfficiencyIsTheTable1Fit) {
  const double shipped = find_gpu("a100").gemm_efficiency;
  double best = 0, best_error = INFINITY;
  for (double eff = 0.60; eff <= 0.751; eff += 0.01) {
    double sum = 0;
    for (PublishedRun run : published_runs()) {
      if (!run.calibration) continue;
      run.inputs.gpu.gemm_efficiency = eff;
      const RunCheck c = check_run(run);
      sum += std::pow(std::log(c.predicted / run.published), 2);
    }
    if (sum < best_error) best_error = sum, best = eff;
  }
  EXPECT_NEAR(best, shipped, 0.0101)
      << "refit " << best << " vs configs/clusters/a100.toml " << shipped;
}

// Every row within 4 points with its published TP/CP/PP/DP. What row 1 (8,192 GPUs, 32
// micro-batches per pipeline) needs: Llama 3's own pipeline (126 layers + embedding + head on
// 16 x 8 one-unit stages, §3.3.2), the caching allocator's live peak (alloc=live) and ZeRO-2's
// per-micro-batch reduce-scatter hidden behind the next micro-batch (FSDP "shards the optimizer
// states and gradients", §3.3.2); without them the plan fell back to ZB-H1 and missed by 5.7.
TEST(Validation, Llama3Table4WithinFourPointsAndUnder80GB) {
  int rows = 0;
  for (const PublishedRun& run : published_runs()) {
    if (run.source.find("2407.21783") == std::string::npos) continue;
    ++rows;
    const RunCheck c = check_run(run);
    EXPECT_LE(std::fabs(c.error), 0.04)
        << run.name << ": MFU " << c.predicted << " vs " << run.published;
    EXPECT_LT(c.plan.best().step.memory.total(), 80e9) << run.name;
    EXPECT_EQ(c.plan.best().layout.tp, run.inputs.search.fixed.tp);
    EXPECT_EQ(c.plan.best().layout.dp, run.inputs.search.fixed.dp);
    if (run.inputs.gpus == 8192) {
      const Layout& l = c.plan.best().layout;
      EXPECT_EQ(l.schedule, schedule::ScheduleKind::kInterleaved);
      EXPECT_EQ(l.chunks, 8);
      EXPECT_EQ(l.partition, Partition::kBalanced);
      EXPECT_EQ(l.zero, 2);
    }
  }
  EXPECT_EQ(rows, 3);
}

TEST(Validation, OtherPublishedRunsWithinTolerance) {
  int rows = 0;
  for (const PublishedRun& run : published_runs()) {
    if (run.calibration || run.source.find("2407.21783") != std::string::npos) continue;
    ++rows;
    const RunCheck c = check_run(run);
    EXPECT_TRUE(c.within) << run.name << ": predicted " << c.predicted << ", published "
                          << run.published << ", tolerance " << run.tolerance;
  }
  EXPECT_EQ(rows, 12);  // Table 2 x 6, Korthikanti x 2, MT-NLG x 3, BLOOM
}

// Korthikanti's point, reproduced: on the same 530B layout, SP + selective recompute is much
// faster than full recompute and still fits.
TEST(Validation, SelectiveRecomputeBeatsFullOnThe530BLayout) {
  double full = 0, selective = 0;
  for (const PublishedRun& run : published_runs()) {
    if (run.source.find("2205.05198") == std::string::npos) continue;
    const RunCheck c = check_run(run);
    (c.plan.best().layout.recompute == Recompute::kFull ? full : selective) = c.predicted;
    EXPECT_LT(c.plan.best().step.memory.total(), 80e9);
  }
  EXPECT_GT(selective, full * 1.15);
}

}  // namespace
}  // namespace trillion::plan
