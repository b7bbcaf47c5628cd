// Block-scaled quantisation and the emulated FP8/FP4 GEMM (issue 14): scales as the recipes
// define them (DeepSeek-V3 amax tiles, OCP MX E8M0 blocks, NVFP4 two-level), the fast GEMM
// bitwise equal to the 128-bit-integer reference, and the error against an fp32 GEMM per recipe.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "precision/block_scaling.h"
#include "precision/scaled_gemm.h"

namespace trillion::precision {
namespace {

std::vector<float> gaussian(int64_t n, uint64_t seed, float scale = 1.0f) {
  const Philox rng(seed, "precision-test");
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(rng.normal(i));
  return v;
}

TEST(BlockScaling, AmaxTilesMapTheLargestMagnitudeToTheLargestCode) {
  std::vector<float> x = gaussian(4 * 256, 1);
  x[3 * 256 + 200] = -37.5f;  // tile (3, 1)'s amax
  const BlockQuantized q = quantize(x.data(), 4, 256, 256, {});
  ASSERT_EQ(q.scales.size(), 8u);
  EXPECT_EQ(q.scale(3, 130), 37.5f / 448.0f);
  EXPECT_EQ(q.value(3, 200), -37.5f);  // amax is exact: it becomes -448 * scale
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t c = 0; c < 256; ++c) {
      // E4M3 keeps 3 mantissa bits: relative error <= 2^-4 for values in the normal range.
      const float v = x[r * 256 + c], s = q.scale(r, c);
      if (std::fabs(v) >= s * std::ldexp(1.0f, -6)) {
        EXPECT_LE(std::fabs(q.value(r, c) - v), std::fabs(v) * 0.0625f) << r << "," << c;
      }
    }
  }
}

TEST(BlockScaling, MxScalesArePowersOfTwoFromTheAmaxExponent) {
  std::vector<float> x(64, 0.1f);
  x[5] = 13.0f;  // block 0: floor(log2 13) = 3, minus emax 2 -> scale 2^1; 13/2 = 6.5 -> 6
  x[40] = 0.7f;  // block 1: floor(log2 0.7) = -1 -> 2^-3
  const BlockQuantized q =
      quantize(x.data(), 1, 64, 64, {MiniFormat::e2m1, Scaling::kMx, 1, 32, nullptr});
  EXPECT_EQ(q.scales[0], 2.0f);
  EXPECT_EQ(q.scales[1], 0.125f);
  EXPECT_EQ(q.value(0, 5), 12.0f);    // saturates at 6 * 2
  EXPECT_EQ(q.value(0, 40), 0.75f);   // 0.7 / 0.125 = 5.6 -> 6 * 0.125
  EXPECT_EQ(q.value(0, 41), 0.125f);  // 0.1 / 0.125 = 0.8 -> 1 (nearest of 0.5, 1)
}

TEST(BlockScaling, Nvfp4HasATensorScaleAndE4m3BlockScales) {
  std::vector<float> x = gaussian(2 * 32, 3);
  x[17] = 24.0f;  // the tensor's amax
  const BlockQuantized q =
      quantize(x.data(), 2, 32, 32, {MiniFormat::e2m1, Scaling::kNvfp4, 1, 16, nullptr});
  EXPECT_EQ(q.tensor_scale, 24.0f / (448.0f * 6.0f));
  for (float s : q.scales) EXPECT_EQ(s, round_to(MiniFormat::e4m3, s)) << s;  // E4M3 codes
  // The block holding the amax: its scale is 24 / 6 / tensor_scale = 448 exactly.
  EXPECT_EQ(q.scale(0, 17), 448.0f);
  EXPECT_FLOAT_EQ(q.value(0, 17), 24.0f);
}

TEST(BlockScaling, NonFiniteInputIsRefused) {
  std::vector<float> x(128, 1.0f);
  x[7] = NAN;
  EXPECT_THROW(quantize(x.data(), 1, 128, 128, {}), Error);
}

// One recipe's GEMM: x [M, K] in 1xB tiles, w [N, K] in BxB (FP8) or 1xB (FP4) tiles.
struct Case {
  const char* name;
  QuantizeOptions act, weight;
};

TEST(ScaledGemm, FastPathIsBitwiseTheReferenceAndErrorsArePerRecipe) {
  const int64_t M = 48, N = 40, K = 384;
  const std::vector<float> x = gaussian(M * K, 11), w = gaussian(N * K, 12, 0.05f);
  // fp32 reference of the unquantised product, in double for a clean baseline.
  std::vector<double> exact(M * N, 0);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t k = 0; k < K; ++k) exact[m * N + n] += double(x[m * K + k]) * w[n * K + k];
    }
  }
  const Case cases[] = {
      {"fp8 e4m3 1x128 / 128x128",
       {MiniFormat::e4m3, Scaling::kAmax, 1, 128, nullptr},
       {MiniFormat::e4m3, Scaling::kAmax, 128, 128, nullptr}},
      {"fp8 e5m2 x e4m3",
       {MiniFormat::e5m2, Scaling::kAmax, 1, 128, nullptr},
       {MiniFormat::e4m3, Scaling::kAmax, 128, 128, nullptr}},
      {"mxfp4 1x32",
       {MiniFormat::e2m1, Scaling::kMx, 1, 32, nullptr},
       {MiniFormat::e2m1, Scaling::kMx, 1, 32, nullptr}},
      {"nvfp4 1x16",
       {MiniFormat::e2m1, Scaling::kNvfp4, 1, 16, nullptr},
       {MiniFormat::e2m1, Scaling::kNvfp4, 1, 16, nullptr}},
  };
  double rms[4];
  for (int i = 0; i < 4; ++i) {
    const Case& c = cases[i];
    const BlockQuantized qa = quantize(x.data(), M, K, K, c.act);
    const BlockQuantized qb = quantize(w.data(), N, K, K, c.weight);
    std::vector<float> fast(M * N), ref(M * N);
    scaled_gemm(qa, qb, fast.data());
    scaled_gemm_reference(qa, qb, ref.data());
    for (int64_t j = 0; j < M * N; ++j) ASSERT_EQ(fast[j], ref[j]) << c.name << " element " << j;
    // The reference is also the plain definition: dequantise, multiply exactly, within 1e-6.
    std::vector<float> da(M * K), db(N * K);
    dequantize(qa, da.data());
    dequantize(qb, db.data());
    double err2 = 0, ref2 = 0;
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        double d = 0;
        for (int64_t k = 0; k < K; ++k) d += double(da[m * K + k]) * db[n * K + k];
        EXPECT_NEAR(ref[m * N + n], d, 1e-5 * (1 + std::fabs(d))) << c.name;
        err2 += (ref[m * N + n] - exact[m * N + n]) * (ref[m * N + n] - exact[m * N + n]);
        ref2 += exact[m * N + n] * exact[m * N + n];
      }
    }
    rms[i] = std::sqrt(err2 / ref2);
    std::printf("%-28s relative RMS error vs the unquantised product: %.4f\n", c.name, rms[i]);
  }
  // E4M3 (3 mantissa bits: unit roundoff 2^-4, RMS ~2^-4/sqrt(3) per operand) is several times
  // more accurate than E2M1 (1 mantissa bit), and E5M2 activations lose one more bit.
  EXPECT_LT(rms[0], 0.06);
  EXPECT_GT(rms[1], rms[0]);
  EXPECT_LT(rms[0] * 3, rms[2]);
  EXPECT_LT(rms[3], rms[2]);  // NVFP4's smaller blocks and finer E4M3 scales beat MXFP4
  EXPECT_LT(rms[2], 0.3);
}

}  // namespace
}  // namespace trillion::precision
