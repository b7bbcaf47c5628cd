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
// The probe every training run makes at its start. One thread (each rank of a multi-process
// job on a small machine, every test job): best of six 1024^3 GEMMs, the same peak as 2048^3
// (91.7-94.2 vs 93.6 GFLOP/s over five runs on one AVX2 core) in 0.15 s instead of 0.57 s. More
// threads: best of two 2048^3, as before (inside the trainer two threads measure below `bench
// gemm` at either size, 138-184 vs 185 GFLOP/s: not yet explained).
GemmPeak measure_training_gemm_peak();

}  // namespace trillion
