// The random Hadamard transform of the wgrad inputs (precision/hadamard.h, NVIDIA 2509.25149):
// R = diag(s) H / 4 is orthonormal (R R^T = I exactly, in f64 and in fp32); transforming both
// operands of a GEMM along K leaves the unquantised product unchanged to fp32 rounding, with K
// zero-padded to a multiple of 16; a row's transform depends on nothing but the row; and the
// wgrad GEMM's error with and without it, on Gaussian data and with outlier tokens, per recipe.
#include "precision/hadamard.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "model/linear_gemm.h"

namespace trillion::precision {
namespace {

std::vector<float> gaussian(int64_t n, uint64_t seed, float scale = 1.0f) {
  const Philox rng(seed, "hadamard-test");
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(rng.normal(i));
  return v;
}

TEST(RandomHadamard, IsOrthonormalWithRandomSigns) {
  const RandomHadamard rht(16, 7);
  const std::vector<double> r = rht.matrix();
  for (int64_t i = 0; i < 16; ++i) {
    for (int64_t j = 0; j < 16; ++j) {
      EXPECT_EQ(std::fabs(r[i * 16 + j]), 0.25);
      double d = 0;
      float f = 0;  // the same sum in fp32: every partial sum is a multiple of 1/16, exact
      for (int64_t k = 0; k < 16; ++k) {
        d += r[i * 16 + k] * r[j * 16 + k];
        f += static_cast<float>(r[i * 16 + k]) * static_cast<float>(r[j * 16 + k]);
      }
      EXPECT_EQ(d, i == j ? 1.0 : 0.0) << i << "," << j;
      EXPECT_EQ(f, i == j ? 1.0f : 0.0f) << i << "," << j;
    }
  }
  int negative = 0;
  for (double s : rht.signs()) negative += s < 0;
  EXPECT_GT(negative, 0);
  EXPECT_LT(negative, 16);
  // The signs are the seed's: another seed draws another vector, the same seed the same one.
  EXPECT_EQ(RandomHadamard(16, 7).signs(), rht.signs());
  EXPECT_NE(RandomHadamard(16, 8).signs(), rht.signs());
  for (int64_t bad : {0, 1, 12, 512}) EXPECT_THROW(RandomHadamard(bad, 7), Error) << bad;
}

// apply() is x R block by block, K padded with zeros; (A R)(B R)^T = A B^T to fp32 rounding.
TEST(RandomHadamard, LeavesTheUnquantisedProductUnchanged) {
  const int64_t M = 24, N = 20, K = 100;  // K = 6 blocks of 16 + 4
  const RandomHadamard rht(16, 3);
  ASSERT_EQ(rht.padded(K), 112);
  const std::vector<float> a = gaussian(M * K, 1), b = gaussian(N * K, 2, 0.05f);
  std::vector<float> ta, tb;
  rht.apply(a.data(), M, K, K, ta);
  rht.apply(b.data(), N, K, K, tb);
  ASSERT_EQ(ta.size(), static_cast<size_t>(M * 112));
  const std::vector<double> r = rht.matrix();
  for (int64_t m = 0; m < M; ++m) {  // the definition, in f64
    for (int64_t c = 0; c < 112; ++c) {
      double d = 0;
      for (int64_t i = 0; i < 16; ++i) {
        const int64_t k = c / 16 * 16 + i;
        d += (k < K ? a[m * K + k] : 0.0) * r[i * 16 + c % 16];
      }
      EXPECT_NEAR(ta[m * 112 + c], d, 1e-6 * (1 + std::fabs(d)));
    }
  }
  double worst = 0;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double plain = 0, transformed = 0, magnitude = 0;
      for (int64_t k = 0; k < K; ++k) {
        plain += double(a[m * K + k]) * b[n * K + k];
        magnitude += std::fabs(double(a[m * K + k]) * b[n * K + k]);
      }
      for (int64_t k = 0; k < 112; ++k) transformed += double(ta[m * 112 + k]) * tb[n * 112 + k];
      worst = std::max(worst, std::fabs(transformed - plain) / magnitude);
    }
  }
  // Each transformed value carries one fp32 rounding (2^-24 relative) of a sum of 16 terms.
  EXPECT_LT(worst, 4 * std::ldexp(1.0, -24) * 4);
  // A row's transform is the row's alone: the last 5 rows by themselves give the same values.
  std::vector<float> tail;
  rht.apply(a.data() + (M - 5) * K, 5, K, K, tail);
  EXPECT_EQ(tail, std::vector<float>(ta.end() - 5 * 112, ta.end()));
}

// A recipe's wgrad dW[O, I] = dy^T x (K = T tokens) against the exact product: the relative RMS
// error with a 16-point transform and without, the recipe otherwise as defined.
struct WgradErrors {
  double with_rht = 0, without = 0;
  double ratio() const { return with_rht / without; }
};
WgradErrors wgrad_errors(const char* recipe, const std::vector<float>& dy,
                         const std::vector<float>& x, int64_t T, int64_t O, int64_t I) {
  MemoryTracker tracker;
  std::unique_ptr<Backend> be = make_cpu_backend(tracker);
  std::vector<double> exact(O * I, 0);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t o = 0; o < O; ++o) {
      for (int64_t i = 0; i < I; ++i) exact[o * I + i] += double(dy[t * O + o]) * x[t * I + i];
    }
  }
  auto error = [&](const Recipe& r) {
    LinearPrecision lp(r, 5);
    std::vector<float> dyv = dy, xv = x, dw(O * I);
    lp.gemm(*be, GemmPass::wgrad, Tensor(dw.data(), DType::f32, {O, I}), true, false,
            Tensor(dyv.data(), DType::f32, {T, O}), Tensor(xv.data(), DType::f32, {T, I}), 1, 0);
    double e2 = 0, r2 = 0;
    for (int64_t j = 0; j < O * I; ++j) {
      e2 += (dw[j] - exact[j]) * (dw[j] - exact[j]);
      r2 += exact[j] * exact[j];
    }
    return std::sqrt(e2 / r2);
  };
  return {error(recipe_with(recipe, 16)), error(recipe_with(recipe, 0))};
}

// Outlier tokens: every 24th token's gradient row is 30x the others (the wgrad operand dy^T
// then has an outlier column inside most 16-token blocks). MXFP4's power-of-two scale puts the
// block's amax in [4, 8) x scale, so a lone spike saturates at 6 (up to 25% off) and holds most
// of the block's energy; spread over the block by the transform, that loss shrinks: the error
// falls (measured 0.763x). NVFP4's E4M3 scale maps the spike to 6 almost exactly, so there is
// no such loss to remove, while the spread block lands in E2M1's top binade (steps of 2 between
// 4 and 6) and rounds coarser: the RMS error rises (measured 1.13x). On Gaussian data both are
// within 2% either way. The paper's gain (2509.25149) is in the loss of long runs at 12B; this
// test pins what one GEMM shows.
TEST(RandomHadamard, WgradErrorWithOutlierTokensFallsForMxfp4AndNotForNvfp4) {
  const int64_t T = 512, O = 64, I = 96;
  std::vector<float> dy = gaussian(T * O, 21, 1e-3f);
  const std::vector<float> x = gaussian(T * I, 22);
  const WgradErrors mx_plain = wgrad_errors("mxfp4", dy, x, T, O, I);
  const WgradErrors nv_plain = wgrad_errors("nvfp4", dy, x, T, O, I);
  for (int64_t t = 5; t < T; t += 24) {
    for (int64_t o = 0; o < O; ++o) dy[t * O + o] *= 30;
  }
  const WgradErrors mx = wgrad_errors("mxfp4", dy, x, T, O, I);
  const WgradErrors nv = wgrad_errors("nvfp4", dy, x, T, O, I);
  std::printf(
      "wgrad RMS relative error, 16-point RHT / none:\n  gaussian: mxfp4 %.4f / %.4f (%.3fx), "
      "nvfp4 %.4f / %.4f (%.3fx)\n  outlier tokens: mxfp4 %.4f / %.4f (%.3fx), nvfp4 %.4f / "
      "%.4f (%.3fx)\n",
      mx_plain.with_rht, mx_plain.without, mx_plain.ratio(), nv_plain.with_rht, nv_plain.without,
      nv_plain.ratio(), mx.with_rht, mx.without, mx.ratio(), nv.with_rht, nv.without, nv.ratio());
  for (double r : {mx_plain.ratio(), nv_plain.ratio()}) {
    EXPECT_GT(r, 0.95);
    EXPECT_LT(r, 1.05);
  }
  EXPECT_LT(mx.ratio(), 0.85);
  EXPECT_GT(nv.ratio(), 1.0);
  EXPECT_LT(nv.ratio(), 1.3);
  EXPECT_GT(mx.without, mx_plain.without * 1.15);  // the outliers did hurt MXFP4
}

}  // namespace
}  // namespace trillion::precision
