// The block-scaled low-precision GEMM as FP8/FP4 tensor-core kernels compute it, emulated
// exactly on the CPU: out[M, N] = A[M, K] * B[N, K]^T, with A and B block-quantised with the
// same tile width along K, which is also the accumulation interval (DeepSeek-V3 2412.19437
// §3.3.2 promotes the tensor cores' partial sums to fp32 every 128 elements of K and applies the
// scales there). Per K block the sum of the code products is taken exactly (every code is an
// integer multiple of its format's smallest subnormal, so the block sum is an integer), rounded
// once to fp32, multiplied by the fp32 product of the two tile scales and added to an fp32
// accumulator, block by block in increasing K; the NVFP4 tensor scales multiply the result at
// the end. A hardware kernel's only freedom is the order inside its reduction tree for the
// in-block sum, which this takes as exact.
#pragma once

#include "precision/block_scaling.h"

namespace trillion::precision {

// Fast path: one BLAS dgemm per K block where the block sums are exact in double (E4M3 x E4M3
// and the FP4 formats); the reference otherwise.
void scaled_gemm(const BlockQuantized& a, const BlockQuantized& b, float* out);

// The same definition as three plain loops with 128-bit integer block sums (the tests' oracle).
void scaled_gemm_reference(const BlockQuantized& a, const BlockQuantized& b, float* out);

}  // namespace trillion::precision
