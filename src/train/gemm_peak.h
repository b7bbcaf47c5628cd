// The measured GEMM peaks of this machine with the engine's BLAS and thread count: fp32, and each
// precision recipe's linear GEMM as it runs in training. MFU's denominator is built from them
// (train/mfu_peak.h), measured in the same run as the step it divides.
#pragma once

#include <cstdint>

#include "precision/recipe.h"

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

// Best of `reps` forward GEMMs of a linear layer of size^3 (activations [size, size] times a
// weight [size, size]^T) as the recipe runs them in training (model/linear_gemm.h: bf16 on oneDNN
// or emulated, block-scaled with its quantisation), the weight in an attached master as the
// trainer keeps it. FLOPs 2 size^3 per GEMM.
GemmPeak measure_linear_gemm_peak(const precision::Recipe& recipe, int64_t size, int reps);
// The memory bandwidth the backend's streaming ops reach (y += x over arrays far larger than the
// caches, both threads): GB/s, counting 3 x 4 bytes per element (two reads, one write). Best of
// `reps`. What `bench step --profile` compares the memory-bound ops with.
double measure_memory_bandwidth(int64_t elements = int64_t{1} << 24, int reps = 3);
// The training probe's sizes (as measure_training_gemm_peak) for the recipe's GEMM.
GemmPeak measure_training_linear_gemm_peak(const precision::Recipe& recipe);

}  // namespace trillion
