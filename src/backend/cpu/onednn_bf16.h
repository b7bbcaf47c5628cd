// bf16 GEMMs through oneDNN's matmul (bf16 inputs, fp32 accumulation and output) where the build
// has oneDNN (CMake option TRILLION_ONEDNN, libdnnl-dev) and the CPU runs bf16 dot products
// natively (AVX512-BF16 or AMX, detected at run time). Elsewhere onednn_bf16_available() is
// false and callers use the exact emulation (bf16-rounded operands through the fp32 GEMM): the
// two differ only in the order of the fp32 accumulation (a product of two bf16 numbers is exact
// in fp32).
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace trillion {

// True when onednn_bf16_gemm may be called: built with oneDNN, the CPU has native bf16, and the
// environment does not set TRILLION_ONEDNN=0 (which forces the emulation, for benchmarks).
bool onednn_bf16_available();
// Why it is or is not available, in words ("oneDNN 2.6.3, avx512_core_bf16", "built without
// oneDNN", ...).
std::string onednn_bf16_status();

// C[M, N] (row stride ldc) = alpha * op(A) op(B) + beta * C with op(A) [M, K] and op(B) [K, N];
// A is stored [M, K] (or [K, M] when ta) with row stride lda, B [K, N] (or [N, K] when tb) with
// row stride ldb, all row-major. Throws when !onednn_bf16_available().
void onednn_bf16_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda,
                      const bf16* B, int64_t ldb, float alpha, float beta, float* C, int64_t ldc);

}  // namespace trillion
