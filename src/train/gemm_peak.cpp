// See gemm_peak.h.
#include "train/gemm_peak.h"

#include <algorithm>

#include "backend/backend.h"
#include "core/timer.h"
#include "model/linear_gemm.h"

namespace trillion {

namespace {
// The fastest of `reps` calls of f after one warm-up call, in seconds.
template <typename F>
double best_seconds(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r <= reps; ++r) {
    Timer t;
    f();
    if (r > 0) best = std::min(best, t.seconds());
  }
  return best;
}
}  // namespace

GemmPeak measure_gemm_peak(int64_t size, int reps) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  Buffer a(tracker, MemoryCategory::workspace, DType::f32, size * size);
  Buffer b(tracker, MemoryCategory::workspace, DType::f32, size * size);
  Buffer c(tracker, MemoryCategory::workspace, DType::f32, size * size);
  be->fill(a.flat(), 0.5);
  be->fill(b.flat(), 0.25);
  const double best = best_seconds(reps, [&] {
    be->gemm(c.view(0, {size, size}), false, false, a.view(0, {size, size}),
             b.view(0, {size, size}), 1.0, 0.0);
  });
  return {2.0 * static_cast<double>(size) * size * size / best / 1e9, be->threads(), size};
}

GemmPeak measure_training_gemm_peak() {
  MemoryTracker tracker;
  const int threads = make_cpu_backend(tracker)->threads();
  return threads == 1 ? measure_gemm_peak(1024, 6) : measure_gemm_peak(2048, 2);
}

GemmPeak measure_linear_gemm_peak(const precision::Recipe& recipe, int64_t size, int reps) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  Buffer x(tracker, MemoryCategory::workspace, DType::f32, size * size);
  Buffer w(tracker, MemoryCategory::parameters, DType::f32, size * size);
  Buffer y(tracker, MemoryCategory::workspace, DType::f32, size * size);
  be->fill(x.flat(), 0.5);
  be->fill(w.flat(), 0.25);
  LinearPrecision linear(recipe, /*seed=*/1);
  linear.attach_weights(w, tracker);
  linear.begin_step(0);
  const double best = best_seconds(reps, [&] {
    linear.gemm(*be, precision::GemmPass::forward, y.view(0, {size, size}), false, true,
                x.view(0, {size, size}), w.view(0, {size, size}), 1.0, 0.0);
  });
  return {2.0 * static_cast<double>(size) * size * size / best / 1e9, be->threads(), size};
}

double measure_memory_bandwidth(int64_t elements, int reps) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  Buffer x(tracker, MemoryCategory::workspace, DType::f32, elements);
  Buffer y(tracker, MemoryCategory::workspace, DType::f32, elements);
  be->fill(x.flat(), 0.5);
  be->fill(y.flat(), 0.25);
  const double best = best_seconds(reps, [&] { be->add(y.flat(), x.flat()); });
  return 12.0 * static_cast<double>(elements) / best / 1e9;
}

GemmPeak measure_training_linear_gemm_peak(const precision::Recipe& recipe) {
  MemoryTracker tracker;
  const int threads = make_cpu_backend(tracker)->threads();
  // The emulated block-scaled product runs far below the BLAS peak at any size (one dgemm per K
  // block): a small probe measures it as well and keeps low-precision test runs fast.
  if (recipe.rounding == precision::Rounding::block_scaled) {
    return measure_linear_gemm_peak(recipe, 512, 2);
  }
  return threads == 1 ? measure_linear_gemm_peak(recipe, 1024, 3)
                      : measure_linear_gemm_peak(recipe, 2048, 2);
}

}  // namespace trillion
