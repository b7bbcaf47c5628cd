// oneDNN's bf16 matmul (backend/cpu/onednn_bf16.h, issue 14) against the exact emulation (the
// fp32 GEMM of the same bf16-rounded operands): every transpose combination, alpha and beta, a
// row stride wider than the row. A product of two bf16 numbers is exact in fp32, so the two
// differ only in the fp32 accumulation order: |diff| <= 2 K eps32 sum_k |a_k b_k| per element
// (+ the beta term's rounding). The linear layers' bf16 recipe through oneDNN equals the same
// emulation within that bound. Skipped with a message on a build or CPU without native bf16.
#include "backend/cpu/onednn_bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "backend/backend.h"
#include "core/philox.h"
#include "model/linear_gemm.h"

namespace trillion {
namespace {

std::vector<float> bf16_values(int64_t n, uint64_t seed, float scale) {
  const Philox rng(seed, "onednn-bf16-test");
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = bf16_to_float(float_to_bf16(scale * static_cast<float>(rng.normal(i))));
  return v;
}

std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = float_to_bf16(v[i]);
  return out;
}

// [rows, cols] with row stride ld over v.
Tensor strided(std::vector<float>& v, int64_t rows, int64_t cols, int64_t ld) {
  return Tensor(v.data(), DType::f32, {rows, ld}).columns(0, cols);
}

TEST(OneDnnBf16, MatchesTheEmulationWithinTheAccumulationOrderBound) {
  if (!onednn_bf16_available()) GTEST_SKIP() << "no native bf16 GEMM: " << onednn_bf16_status();
  MemoryTracker tracker;
  std::unique_ptr<Backend> be = make_cpu_backend(tracker);
  const int64_t M = 37, N = 29, K = 300, pad = 3;  // odd sizes, rows wider than the data
  const float eps = std::ldexp(1.0f, -23);
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.5f, 1.0f}}) {
        const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K;
        const int64_t b_rows = tb ? N : K, b_cols = tb ? K : N;
        const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = N + pad;
        const std::vector<float> a = bf16_values(a_rows * lda, 1 + ta, 1.0f);
        const std::vector<float> b = bf16_values(b_rows * ldb, 3 + tb, 0.05f);
        std::vector<float> c = bf16_values(M * ldc, 5, 1.0f), ref = c;
        const std::vector<float> c0 = c;
        onednn_bf16_gemm(ta, tb, M, N, K, to_bf16(a).data(), lda, to_bf16(b).data(), ldb, alpha,
                         beta, c.data(), ldc);
        std::vector<float> av = a, bv = b;
        be->gemm(strided(ref, M, N, ldc), ta, tb, strided(av, a_rows, a_cols, lda),
                 strided(bv, b_rows, b_cols, ldb), alpha, beta);
        double worst = 0;
        for (int64_t m = 0; m < M; ++m) {
          for (int64_t n = 0; n < N; ++n) {
            double abs_sum = 0;
            for (int64_t k = 0; k < K; ++k) {
              const float x = ta ? a[k * lda + m] : a[m * lda + k];
              const float y = tb ? b[n * ldb + k] : b[k * ldb + n];
              abs_sum += std::fabs(double(x) * y);
            }
            const double bound =
                2.0 * K * eps * (alpha * abs_sum + std::fabs(beta * c0[m * ldc + n])) + 1e-30;
            const double diff = std::fabs(double(c[m * ldc + n]) - ref[m * ldc + n]);
            EXPECT_LE(diff, bound) << "ta " << ta << " tb " << tb << " m " << m << " n " << n;
            worst = std::max(worst, diff / bound);
          }
          // the padding between rows is untouched
          for (int64_t n = N; n < ldc; ++n) EXPECT_EQ(c[m * ldc + n], c0[m * ldc + n]);
        }
        RecordProperty(testing::PrintToString(ta * 2 + tb) + "_worst_diff_over_bound",
                       testing::PrintToString(worst));
      }
    }
  }
}

// The bf16 recipe's linear GEMM takes the oneDNN path where available; it equals the emulated
// path (TRILLION_ONEDNN=0) within the accumulation-order bound, measured here as relative to
// the largest |output|.
TEST(OneDnnBf16, LinearRecipeUsesItAndAgreesWithTheEmulation) {
  if (!onednn_bf16_available()) GTEST_SKIP() << "no native bf16 GEMM: " << onednn_bf16_status();
  MemoryTracker tracker;
  std::unique_ptr<Backend> be = make_cpu_backend(tracker);
  const int64_t N = 64, I = 96, O = 48;
  std::vector<float> x = bf16_values(N * I, 7, 1.0f), w = bf16_values(O * I, 8, 0.02f);
  std::vector<float> y(N * O), y_emul(N * O);
  LinearPrecision lp(precision::recipe_named("bf16"), 1);
  lp.gemm(*be, precision::GemmPass::forward, Tensor(y.data(), DType::f32, {N, O}), false, true,
          Tensor(x.data(), DType::f32, {N, I}), Tensor(w.data(), DType::f32, {O, I}), 1, 0);
  setenv("TRILLION_ONEDNN", "0", 1);
  EXPECT_FALSE(onednn_bf16_available());
  lp.gemm(*be, precision::GemmPass::forward, Tensor(y_emul.data(), DType::f32, {N, O}), false, true,
          Tensor(x.data(), DType::f32, {N, I}), Tensor(w.data(), DType::f32, {O, I}), 1, 0);
  unsetenv("TRILLION_ONEDNN");
  double max_out = 0, max_diff = 0;
  for (int64_t i = 0; i < N * O; ++i) {
    max_out = std::max(max_out, std::fabs(double(y_emul[i])));
    max_diff = std::max(max_diff, std::fabs(double(y[i]) - y_emul[i]));
  }
  EXPECT_GT(max_out, 0.1);
  EXPECT_LT(max_diff / max_out, 2.0 * I * std::ldexp(1.0, -23));
  RecordProperty("max_diff_over_max_out", testing::PrintToString(max_diff / max_out));
}

}  // namespace
}  // namespace trillion
