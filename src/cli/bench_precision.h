// `trillion bench gemm --dtype bf16|fp8|fp8-e5m2|mxfp4|nvfp4`: a low-precision GEMM of an
// activation-shaped A [M, K] and a weight B [N, K], timed next to the fp32 GEMM of the same
// inputs in the same run, and its error against that fp32 product (max and RMS relative).
//   bf16   oneDNN's bf16 matmul where the CPU has native bf16 (backend/cpu/onednn_bf16.h), the
//          operands rounded once beforehand; elsewhere "emulated": the fp32 GEMM of the rounded
//          operands (same numbers up to the accumulation order, fp32 speed).
//   others the emulated block-scaled GEMM (precision/scaled_gemm.h) with each recipe's tiles,
//          quantisation included in the time.
// And the same error for a training recipe's linear GEMM (bench step).
#pragma once

#include <cstdint>
#include <string>

namespace trillion::cli {

int bench_precision_gemm(const std::string& dtype, int64_t size, int reps, bool json);

// `bench step --set precision.recipe=...`: the error vs fp32 of one linear layer's forward GEMM
// through the recipe (model/linear_gemm.h), out[M, N] = x[M, K] W[N, K]^T with x ~ N(0, 1) and
// W ~ N(0, 0.02^2): RMS relative error and the largest error over the largest |output|.
struct RecipeGemmError {
  double rms_rel = 0, max_rel_to_max = 0;
};
RecipeGemmError recipe_gemm_error(const std::string& recipe, int64_t M, int64_t N, int64_t K);

}  // namespace trillion::cli
