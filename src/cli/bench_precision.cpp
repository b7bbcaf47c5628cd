// See bench_precision.h.
#include "cli/bench_precision.h"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "backend/cpu/onednn_bf16.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/philox.h"
#include "core/timer.h"
#include "model/linear_gemm.h"
#include "precision/scaled_gemm.h"

namespace trillion::cli {

namespace {

struct Tiles {
  precision::QuantizeOptions act, weight;
};

Tiles recipe_tiles(const std::string& dtype) {
  using precision::Scaling;
  if (dtype == "fp8") {  // DeepSeek-V3: E4M3, 1x128 activation tiles, 128x128 weight blocks
    return {{MiniFormat::e4m3, Scaling::kAmax, 1, 128, nullptr},
            {MiniFormat::e4m3, Scaling::kAmax, 128, 128, nullptr}};
  }
  if (dtype == "fp8-e5m2") {  // E5M2 activations (gradients in the hybrid recipes)
    return {{MiniFormat::e5m2, Scaling::kAmax, 1, 128, nullptr},
            {MiniFormat::e4m3, Scaling::kAmax, 128, 128, nullptr}};
  }
  if (dtype == "mxfp4") {
    return {{MiniFormat::e2m1, Scaling::kMx, 1, 32, nullptr},
            {MiniFormat::e2m1, Scaling::kMx, 1, 32, nullptr}};
  }
  if (dtype == "nvfp4") {
    return {{MiniFormat::e2m1, Scaling::kNvfp4, 1, 16, nullptr},
            {MiniFormat::e2m1, Scaling::kNvfp4, 1, 16, nullptr}};
  }
  throw Error(fmt::format(
      "bench gemm --dtype '{}': expected fp32, bf16, fp8, fp8-e5m2, mxfp4 or nvfp4", dtype));
}

}  // namespace

int bench_precision_gemm(const std::string& dtype, int64_t size, int reps, bool json) {
  const bool is_bf16 = dtype == "bf16";
  const Tiles tiles = is_bf16 ? Tiles{} : recipe_tiles(dtype);
  const bool native_bf16 = is_bf16 && onednn_bf16_available();
  const int64_t n = size;
  const Philox rng(1, "bench-precision-gemm");
  std::vector<float> a(n * n), b(n * n), ref(n * n), out(n * n);
  for (int64_t i = 0; i < n * n; ++i) {
    a[i] = static_cast<float>(rng.normal(i));
    b[i] = 0.02f * static_cast<float>(rng.normal(n * n + i));
  }
  // bf16: both operands rounded (nearest even) once, outside the timing, as training keeps its
  // weights in bf16; the timed GEMM is oneDNN's bf16 matmul or, without native bf16, the fp32
  // GEMM of the rounded values (the exact emulation).
  std::vector<bf16> a16, b16;
  std::vector<float> a_rounded, b_rounded;
  if (is_bf16) {
    a16.resize(n * n), b16.resize(n * n), a_rounded.resize(n * n), b_rounded.resize(n * n);
    for (int64_t i = 0; i < n * n; ++i) {
      a16[i] = float_to_bf16(a[i]), b16[i] = float_to_bf16(b[i]);
      a_rounded[i] = bf16_to_float(a16[i]), b_rounded[i] = bf16_to_float(b16[i]);
    }
  }
  const int ni = static_cast<int>(n);
  auto sgemm = [&](const float* x, const float* y, float* c) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ni, ni, ni, 1.0f, x, ni, y, ni, 0.0f, c,
                ni);
  };
  auto fp32 = [&] { sgemm(a.data(), b.data(), ref.data()); };
  auto low_precision = [&] {
    if (native_bf16) {
      onednn_bf16_gemm(false, true, n, n, n, a16.data(), n, b16.data(), n, 1.0f, 0.0f, out.data(),
                       n);
    } else if (is_bf16) {
      sgemm(a_rounded.data(), b_rounded.data(), out.data());
    } else {
      const auto qa = precision::quantize(a.data(), n, n, n, tiles.act);
      const auto qb = precision::quantize(b.data(), n, n, n, tiles.weight);
      precision::scaled_gemm(qa, qb, out.data());
    }
  };
  auto best = [&](auto&& f) {
    f();  // warm-up
    double t = 1e30;
    for (int r = 0; r < reps; ++r) {
      Timer timer;
      f();
      t = std::min(t, timer.seconds());
    }
    return t;
  };
  const double t32 = best(fp32), tq = best(low_precision);
  double max_rel = 0, err2 = 0, ref2 = 0, ref_max = 0;
  for (int64_t i = 0; i < n * n; ++i) ref_max = std::max(ref_max, std::fabs(double(ref[i])));
  for (int64_t i = 0; i < n * n; ++i) {
    const double e = double(out[i]) - ref[i];
    err2 += e * e, ref2 += double(ref[i]) * ref[i];
    max_rel = std::max(max_rel, std::fabs(e) / ref_max);
  }
  const double flops = 2.0 * n * n * n, rms = std::sqrt(err2 / ref2);
  const std::string path = native_bf16 ? "onednn" : "emulated";
  std::string how = "emulated (quantise + block-scaled product)";
  if (native_bf16) how = "oneDNN bf16 matmul (" + onednn_bf16_status() + ")";
  if (is_bf16 && !native_bf16) {
    how = "emulated: bf16-rounded operands through the fp32 GEMM (" + onednn_bf16_status() + ")";
  }
  if (json) {
    std::printf("%s\n", nlohmann::json{{"dtype", dtype},
                                       {"size", size},
                                       {"path", path},
                                       {"gflops", flops / tq / 1e9},
                                       {"fp32_gflops", flops / t32 / 1e9},
                                       {"time_vs_fp32", tq / t32},
                                       {"rms_rel_error", rms},
                                       {"max_error_rel_to_max", max_rel}}
                            .dump()
                            .c_str());
  } else {
    std::printf(
        "%s GEMM %lld^3, %s: %.1f GFLOP/s, %.2fx the fp32 GEMM's time (%.1f GFLOP/s, same "
        "run)\nerror vs fp32: RMS relative %.4f, max %.4f of the largest output\n",
        dtype.c_str(), static_cast<long long>(size), how.c_str(), flops / tq / 1e9, tq / t32,
        flops / t32 / 1e9, rms, max_rel);
  }
  return 0;
}

RecipeGemmError recipe_gemm_error(const std::string& recipe, int64_t M, int64_t N, int64_t K) {
  const Philox rng(7, "bench:recipe-gemm");
  std::vector<float> x(M * K), w(N * K), out(M * N), ref(M * N);
  for (int64_t i = 0; i < M * K; ++i) x[i] = static_cast<float>(rng.normal(i));
  for (int64_t i = 0; i < N * K; ++i) w[i] = 0.02f * static_cast<float>(rng.normal(M * K + i));
  MemoryTracker tracker;
  std::unique_ptr<Backend> be = make_cpu_backend(tracker);
  const Tensor tx(x.data(), DType::f32, {M, K}), tw(w.data(), DType::f32, {N, K});
  be->gemm(Tensor(ref.data(), DType::f32, {M, N}), false, true, tx, tw, 1, 0);
  LinearPrecision lp(precision::recipe_named(recipe), 1);
  lp.gemm(*be, precision::GemmPass::forward, Tensor(out.data(), DType::f32, {M, N}), false, true,
          tx, tw, 1, 0);
  double err2 = 0, ref2 = 0, ref_max = 0, err_max = 0;
  for (int64_t i = 0; i < M * N; ++i) {
    const double e = double(out[i]) - double(ref[i]);
    err2 += e * e, ref2 += double(ref[i]) * ref[i];
    ref_max = std::max(ref_max, std::fabs(double(ref[i])));
    err_max = std::max(err_max, std::fabs(e));
  }
  return {ref2 > 0 ? std::sqrt(err2 / ref2) : 0.0, ref_max > 0 ? err_max / ref_max : 0.0};
}

}  // namespace trillion::cli
