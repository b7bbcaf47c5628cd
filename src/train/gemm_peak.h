// The measured fp32 GEMM peak of this machine with the engine's BLAS and thread count: the
// reference every MFU the engine reports is a fraction of (same run, same machine state).
#pragma once

#include <cstdint>

namespace trillion {

struct GemmPeak {
  double gflops = 0;
  int threads = 0;
  int64_t size = 0;
};

// Best of `reps` square fp32 GEMMs of `size` after one warm-up.
GemmPeak measure_gemm_peak(int64_t size, int reps);
// The probe every training run makes at its start: 1024^3 up to 8 threads (the same peak as
// 2048^3 within 2% there, at an eighth of the time: 0.07 s instead of 0.57 s on one AVX2 core),
// 2048^3 above, where smaller GEMMs leave threads idle.
GemmPeak measure_training_gemm_peak();

}  // namespace trillion
