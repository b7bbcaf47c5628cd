// See gemm_peak.h.
#include "train/gemm_peak.h"

#include <algorithm>

#include "backend/backend.h"
#include "core/timer.h"

namespace trillion {

GemmPeak measure_gemm_peak(int64_t size, int reps) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  Buffer a(tracker, MemoryCategory::workspace, DType::f32, size * size);
  Buffer b(tracker, MemoryCategory::workspace, DType::f32, size * size);
  Buffer c(tracker, MemoryCategory::workspace, DType::f32, size * size);
  be->fill(a.flat(), 0.5);
  be->fill(b.flat(), 0.25);
  double best = 1e30;
  for (int r = 0; r <= reps; ++r) {
    Timer t;
    be->gemm(c.view(0, {size, size}), false, false, a.view(0, {size, size}),
             b.view(0, {size, size}), 1.0, 0.0);
    if (r > 0) best = std::min(best, t.seconds());
  }
  return {2.0 * static_cast<double>(size) * size * size / best / 1e9, be->threads(), size};
}

GemmPeak measure_training_gemm_peak() {
  MemoryTracker tracker;
  const int threads = make_cpu_backend(tracker)->threads();
  return threads == 1 ? measure_gemm_peak(1024, 6) : measure_gemm_peak(2048, 2);
}

}  // namespace trillion
