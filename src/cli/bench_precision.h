// `trillion bench gemm --dtype fp8|fp8-e5m2|mxfp4|nvfp4`: the emulated block-scaled GEMM
// (precision/scaled_gemm.h) of an activation-shaped A [M, K] and a weight B [N, K] with each
// recipe's tiles, timed (quantisation included) next to the fp32 GEMM of the same inputs in the
// same run, and its error against that fp32 product (max and RMS relative).
#pragma once

#include <cstdint>
#include <string>

namespace trillion::cli {

int bench_precision_gemm(const std::string& dtype, int64_t size, int reps, bool json);

}  // namespace trillion::cli
