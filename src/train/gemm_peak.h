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

}  // namespace trillion
