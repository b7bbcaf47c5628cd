// The linear layers' GEMMs through a precision recipe (model/linear_gemm.h, issue 14): fp32 is
// Backend::gemm bitwise; bf16 is the fp32 GEMM of bf16-rounded operands bitwise; fp8/fp4 are the
// block-scaled kernel (scaled_gemm_reference, the 128-bit-integer oracle) of the operands
// quantised with the recipe's rules for the pass, bitwise, with beta accumulation in fp32; the
// weights come from the bf16 copy of the master (stale until refreshed); the error vs fp32 of
// each recipe is in its format's range; the recipes' tiles are the papers'; stochastic rounding
// is keyed by the GEMM's site, not the call order.
#include "model/linear_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "precision/scaled_gemm.h"

namespace trillion {
namespace {

using precision::GemmPass;
using precision::recipe_named;

std::vector<float> gaussian(int64_t n, uint64_t seed, float scale = 1.0f) {
  const Philox rng(seed, "linear-gemm-test");
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(rng.normal(i));
  return v;
}

Tensor view(std::vector<float>& v, int64_t rows, int64_t cols) {
  return Tensor(v.data(), DType::f32, {rows, cols});
}

std::vector<float> bf16_rounded(std::vector<float> v) {
  for (float& x : v) x = bf16_to_float(float_to_bf16(x));
  return v;
}

// [rows, cols] -> [cols, rows]
std::vector<float> transposed(const std::vector<float>& v, int64_t rows, int64_t cols) {
  std::vector<float> t(v.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = v[r * cols + c];
  }
  return t;
}

precision::QuantizeOptions options(const precision::OperandRule& r) {
  return {r.format, r.scaling, r.tile_rows, r.tile_cols, nullptr};
}

// The bitwise bf16 checks are of the emulation: oneDNN's bf16 matmul (where the CPU has it)
// differs in accumulation order and has its own test (onednn_bf16_test.cpp).
struct Fixture {
  Fixture() { setenv("TRILLION_ONEDNN", "0", 1); }
  ~Fixture() { unsetenv("TRILLION_ONEDNN"); }
  MemoryTracker tracker;
  std::unique_ptr<Backend> be = make_cpu_backend(tracker);
};

TEST(PrecisionRecipe, TablesAreThePapersAndUnknownNamesAreRefused) {
  EXPECT_EQ(precision::recipe_names(),
            (std::vector<std::string>{"fp32", "bf16", "fp8", "mxfp4", "nvfp4"}));
  const precision::Recipe& fp8 = recipe_named("fp8");  // DeepSeek-V3 §3.3.1
  EXPECT_EQ(fp8.activation.tile_rows, 1);
  EXPECT_EQ(fp8.activation.tile_cols, 128);
  EXPECT_EQ(fp8.weight.tile_rows, 128);
  EXPECT_EQ(fp8.weight.tile_cols, 128);
  EXPECT_EQ(fp8.gradient.format, MiniFormat::e4m3);
  EXPECT_EQ(recipe_named("mxfp4").weight.tile_cols, 32);
  EXPECT_TRUE(recipe_named("mxfp4").gradient.stochastic);
  EXPECT_FALSE(recipe_named("mxfp4").activation.stochastic);
  EXPECT_EQ(recipe_named("nvfp4").weight.tile_rows, 16);
  EXPECT_EQ(recipe_named("nvfp4").activation.tile_cols, 16);
  EXPECT_EQ(recipe_named("fp32").weight_bytes, 4);
  EXPECT_EQ(recipe_named("bf16").weight_bytes, 2);
  EXPECT_EQ(precision::planner_precision(recipe_named("nvfp4")), "fp4");
  EXPECT_EQ(precision::planner_precision(recipe_named("fp8")), "fp8");
  EXPECT_EQ(precision::planner_precision(recipe_named("bf16")), "bf16");
  try {
    recipe_named("fp6");
    FAIL() << "fp6 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("recipes: fp32, bf16, fp8, mxfp4, nvfp4"),
              std::string::npos)
        << e.what();
  }
}

TEST(LinearGemm, Fp32IsTheBackendGemmAndBf16RoundsBothOperands) {
  Fixture f;
  const int64_t N = 48, I = 40, O = 24;
  std::vector<float> x = gaussian(N * I, 1), w = gaussian(O * I, 2, 0.02f), y(N * O), ref(N * O);
  LinearPrecision fp32(recipe_named("fp32"), 1), bf16(recipe_named("bf16"), 1);
  fp32.gemm(*f.be, GemmPass::forward, view(y, N, O), false, true, view(x, N, I), view(w, O, I), 1,
            0);
  f.be->gemm(view(ref, N, O), false, true, view(x, N, I), view(w, O, I), 1, 0);
  EXPECT_EQ(y, ref);
  // wgrad with beta = 1: dW[O, I] += dy^T x.
  std::vector<float> dy = gaussian(N * O, 3), dw = gaussian(O * I, 4), dw_ref = dw;
  std::vector<float> dyr = bf16_rounded(dy), xr = bf16_rounded(x);
  bf16.gemm(*f.be, GemmPass::wgrad, view(dw, O, I), true, false, view(dy, N, O), view(x, N, I), 1,
            1);
  f.be->gemm(view(dw_ref, O, I), true, false, view(dyr, N, O), view(xr, N, I), 1, 1);
  EXPECT_EQ(dw, dw_ref);
  EXPECT_NE(dyr, dy);  // the rounding did something
}

// Each pass of each block-scaled recipe equals the reference kernel on operands quantised as
// the recipe says, laid out [rows, K] by hand here.
TEST(LinearGemm, BlockScaledPassesAreTheReferenceKernelBitwise) {
  Fixture f;
  const int64_t N = 256, I = 160, O = 136;  // K blocks with a ragged end in every pass
  const std::vector<float> x = gaussian(N * I, 5), w = bf16_rounded(gaussian(O * I, 6, 0.05f));
  const std::vector<float> dy = gaussian(N * O, 7, 1e-3f);
  for (const char* name : {"fp8", "mxfp4", "nvfp4"}) {
    const precision::Recipe& r = recipe_named(name);
    LinearPrecision lp(r, 9);
    auto check = [&](GemmPass pass, const std::vector<float>& a_rows,
                     const std::vector<float>& b_rows, int64_t M, int64_t Nn, int64_t K,
                     const precision::OperandRule& ra, const precision::OperandRule& rb,
                     std::vector<float>& out) {
      precision::QuantizeOptions oa = options(ra);
      if (ra.stochastic) return;  // stochastic operands are checked for determinism below
      const auto qa = precision::quantize(a_rows.data(), M, K, K, oa);
      const auto qb = precision::quantize(b_rows.data(), Nn, K, K, options(rb));
      std::vector<float> ref(M * Nn);
      precision::scaled_gemm_reference(qa, qb, ref.data());
      EXPECT_EQ(out, ref) << name << " pass " << static_cast<int>(pass);
    };
    std::vector<float> xv = x, wv = w, dyv = dy;
    std::vector<float> y(N * O);
    lp.gemm(*f.be, GemmPass::forward, view(y, N, O), false, true, view(xv, N, I), view(wv, O, I), 1,
            0);
    check(GemmPass::forward, x, w, N, O, I, r.activation, r.weight, y);
    std::vector<float> dx(N * I);
    lp.gemm(*f.be, GemmPass::dgrad, view(dx, N, I), false, false, view(dyv, N, O), view(wv, O, I),
            1, 0);
    check(GemmPass::dgrad, dy, transposed(w, O, I), N, I, O, r.gradient, r.weight, dx);
    // wgrad accumulates: dW = 0.5 + dy^T x.
    std::vector<float> dw(O * I, 0.5f);
    lp.gemm(*f.be, GemmPass::wgrad, view(dw, O, I), true, false, view(dyv, N, O), view(xv, N, I), 1,
            1);
    if (!r.gradient.stochastic) {
      const auto qa =
          precision::quantize(transposed(dy, N, O).data(), O, N, N, options(r.gradient));
      const auto qb =
          precision::quantize(transposed(x, N, I).data(), I, N, N, options(r.activation));
      std::vector<float> ref(O * I);
      precision::scaled_gemm_reference(qa, qb, ref.data());
      for (float& v : ref) v = 1.0f * v + 1.0f * 0.5f;
      EXPECT_EQ(dw, ref) << name << " wgrad";
    } else {
      // Stochastic gradients: the same step repeats exactly, another step draws other bits.
      std::vector<float> again(O * I, 0.5f), other(O * I, 0.5f);
      LinearPrecision lp2(r, 9), lp3(r, 9);
      lp3.begin_step(2);
      for (LinearPrecision* l : {&lp2, &lp3}) {  // the same calls as lp: dgrad, then wgrad
        std::vector<float> scratch(N * I);
        l->gemm(*f.be, GemmPass::dgrad, view(scratch, N, I), false, false, view(dyv, N, O),
                view(wv, O, I), 1, 0);
        l->gemm(*f.be, GemmPass::wgrad, view(l == &lp2 ? again : other, O, I), true, false,
                view(dyv, N, O), view(xv, N, I), 1, 1);
      }
      EXPECT_EQ(dw, again) << name;
      EXPECT_NE(dw, other) << name;
    }
  }
}

// The fp4 recipes' stochastic rounding is keyed by the site (step, micro-batch, layer, pass, call
// in the layer), not by the order of the calls: the same GEMM at the same site draws the same
// bits after any other calls (a pipeline stage sees only its layers; ZB-H1 defers W), and another
// micro-batch, layer or second call of the site draws other bits.
TEST(LinearGemm, StochasticRoundingIsKeyedByTheSiteNotTheCallOrder) {
  Fixture f;
  const int64_t N = 64, O = 48, I = 32;
  std::vector<float> x = gaussian(N * I, 1), dy = gaussian(N * O, 2, 1e-3f);
  for (const char* name : {"mxfp4", "nvfp4"}) {
    auto wgrad = [&](LinearPrecision& lp) {
      std::vector<float> dw(O * I, 0.0f);
      lp.gemm(*f.be, GemmPass::wgrad, view(dw, O, I), true, false, view(dy, N, O), view(x, N, I), 1,
              1);
      return dw;
    };
    LinearPrecision alone(recipe_named(name), 9), after(recipe_named(name), 9);
    alone.begin_step(3);
    after.begin_step(3);
    alone.set_site(1, 2);
    const std::vector<float> first = wgrad(alone), second = wgrad(alone);
    after.set_site(0, 1);  // another layer's pass first
    wgrad(after);
    after.set_site(1, 2);
    EXPECT_EQ(wgrad(after), first) << name;
    EXPECT_NE(second, first) << name << ": the site's second call";
    for (const auto& [micro, layer] : {std::pair{0, 2}, std::pair{1, 1}}) {
      LinearPrecision other(recipe_named(name), 9);
      other.begin_step(3);
      other.set_site(micro, layer);
      EXPECT_NE(wgrad(other), first) << name << " micro-batch " << micro << " layer " << layer;
    }
  }
}

// nvfp4's random Hadamard transform is on wgrad only: forward and dgrad equal the recipe without
// it bitwise; wgrad is the reference kernel on the transformed, quantised operands (the
// gradient's stochastic rounding turned off here so the oracle can quantise alike).
TEST(LinearGemm, Nvfp4TransformsTheWgradInputsOnly) {
  Fixture f;
  const int64_t N = 100, I = 48, O = 40;  // N (wgrad's K) not a multiple of 16: zero padding
  std::vector<float> x = gaussian(N * I, 15), w = bf16_rounded(gaussian(O * I, 16, 0.05f));
  std::vector<float> dy = gaussian(N * O, 17, 1e-3f);
  precision::Recipe with = recipe_named("nvfp4");
  with.gradient.stochastic = false;
  precision::Recipe without = with;
  without.wgrad_hadamard = 0;
  ASSERT_EQ(with.wgrad_hadamard, 16);
  LinearPrecision lp(with, 9), plain(without, 9);
  std::vector<float> y(N * O), y_plain(N * O), dx(N * I), dx_plain(N * I);
  lp.gemm(*f.be, GemmPass::forward, view(y, N, O), false, true, view(x, N, I), view(w, O, I), 1, 0);
  plain.gemm(*f.be, GemmPass::forward, view(y_plain, N, O), false, true, view(x, N, I),
             view(w, O, I), 1, 0);
  EXPECT_EQ(y, y_plain);
  lp.gemm(*f.be, GemmPass::dgrad, view(dx, N, I), false, false, view(dy, N, O), view(w, O, I), 1,
          0);
  plain.gemm(*f.be, GemmPass::dgrad, view(dx_plain, N, I), false, false, view(dy, N, O),
             view(w, O, I), 1, 0);
  EXPECT_EQ(dx, dx_plain);
  std::vector<float> dw(O * I), dw_plain(O * I);
  lp.gemm(*f.be, GemmPass::wgrad, view(dw, O, I), true, false, view(dy, N, O), view(x, N, I), 1, 0);
  plain.gemm(*f.be, GemmPass::wgrad, view(dw_plain, O, I), true, false, view(dy, N, O),
             view(x, N, I), 1, 0);
  EXPECT_NE(dw, dw_plain);
  const precision::RandomHadamard rht(16, 9);
  std::vector<float> ta, tb;
  rht.apply(transposed(dy, N, O).data(), O, N, N, ta);
  rht.apply(transposed(x, N, I).data(), I, N, N, tb);
  const auto qa = precision::quantize(ta.data(), O, 112, 112, options(with.gradient));
  const auto qb = precision::quantize(tb.data(), I, 112, 112, options(with.activation));
  std::vector<float> ref(O * I);
  precision::scaled_gemm_reference(qa, qb, ref.data());
  EXPECT_EQ(dw, ref);
}

// The GEMM error of each recipe against fp32 on the forward pass (x ~ N(0, 1), W ~ N(0, 0.02^2)):
// bf16 ~ 2^-9 per element, fp8 a few percent, fp4 ten to twenty percent.
TEST(LinearGemm, ErrorVsFp32IsTheFormatsPrecision) {
  Fixture f;
  const int64_t N = 256, I = 256, O = 256;
  std::vector<float> x = gaussian(N * I, 11), w = gaussian(O * I, 12, 0.02f), ref(N * O);
  f.be->gemm(view(ref, N, O), false, true, view(x, N, I), view(w, O, I), 1, 0);
  const std::vector<std::pair<const char*, std::pair<double, double>>> bounds = {
      {"bf16", {0.001, 0.006}},
      {"fp8", {0.02, 0.06}},
      {"mxfp4", {0.10, 0.25}},
      {"nvfp4", {0.08, 0.20}}};
  for (const auto& [name, b] : bounds) {
    LinearPrecision lp(recipe_named(name), 1);
    std::vector<float> y(N * O);
    lp.gemm(*f.be, GemmPass::forward, view(y, N, O), false, true, view(x, N, I), view(w, O, I), 1,
            0);
    double num = 0, den = 0;
    for (int64_t i = 0; i < N * O; ++i) {
      num += (double(y[i]) - ref[i]) * (double(y[i]) - ref[i]);
      den += double(ref[i]) * ref[i];
    }
    const double rms = std::sqrt(num / den);
    EXPECT_GT(rms, b.first) << name;
    EXPECT_LT(rms, b.second) << name;
  }
}

// A weight inside the attached master buffer is read from the bf16 copy, which only
// refresh_weights (or begin_step) updates.
TEST(LinearGemm, WeightsComeFromTheBf16CopyOfTheMaster) {
  Fixture f;
  const int64_t N = 8, I = 16, O = 4;
  Buffer master(f.tracker, MemoryCategory::optimizer, DType::f32, O * I);
  std::vector<float> w = gaussian(O * I, 13);
  std::copy(w.begin(), w.end(), static_cast<float*>(master.raw()));
  LinearPrecision lp(recipe_named("bf16"), 1);
  lp.attach_weights(master, f.tracker);
  EXPECT_EQ(f.tracker.current(MemoryCategory::parameters), static_cast<size_t>(O * I * 2));
  std::vector<float> x = gaussian(N * I, 14), y(N * O), ref(N * O);
  float* m = static_cast<float*>(master.raw());
  for (int64_t i = 0; i < O * I; ++i) m[i] *= 2;  // the optimizer moved the master
  lp.gemm(*f.be, GemmPass::forward, view(y, N, O), false, true, view(x, N, I),
          master.view(0, {O, I}), 1, 0);
  std::vector<float> xr = bf16_rounded(x), wr = bf16_rounded(w);
  f.be->gemm(view(ref, N, O), false, true, view(xr, N, I), view(wr, O, I), 1, 0);
  EXPECT_EQ(y, ref);  // still the old weights
  lp.begin_step(1);
  lp.gemm(*f.be, GemmPass::forward, view(y, N, O), false, true, view(x, N, I),
          master.view(0, {O, I}), 1, 0);
  for (float& v : wr) v *= 2;
  f.be->gemm(view(ref, N, O), false, true, view(xr, N, I), view(wr, O, I), 1, 0);
  EXPECT_EQ(y, ref);
}

}  // namespace
}  // namespace trillion
