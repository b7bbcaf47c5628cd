// Register-blocked fp32 GEMM for the attention kernels' tiles (cpu_flash_block.cpp), on AVX-512:
//   C[M, N] = alpha * op(A)[M, K] * B[K, N]  (+ C when accumulate),  row-major, any sizes,
// op(A) = A [M, K] (lda) or, with a_transposed, A^T where A is [K, M] (lda): the P^T dO and
// dS^T Q products of the backward pass read A's columns by broadcasting single elements, so
// they need no transposed copy. B must be row-major [K, N]; callers transpose K and V once per
// call (flash_attention_block_*), not per tile. Why not BLAS: a tile is 64 x 64 x 64 (0.5 MFLOP),
// and OpenBLAS spends about as long packing and dispatching such a call as multiplying it;
// measured in `bench step --profile` (docs/engine.md). Each element of C sums its K products in
// order k = 0, 1, ..., so results do not depend on threads or tile positions.
// Without AVX-512 (`kTileGemm` false) the callers keep the BLAS path; this header then defines
// nothing else.
#pragma once

#include <algorithm>
#include <cstdint>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace trillion::cpu {

#if defined(__AVX512F__)
inline constexpr bool kTileGemm = true;

namespace tile_detail {
// R rows x V vectors of 16 columns of C, kept in R * V registers over the whole K loop; the
// last vector's columns are `last` (a mask, for N not a multiple of 16).
template <int R, int V, bool AT>
inline void block(int64_t K, float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
                  float* C, int64_t ldc, bool accumulate, __mmask16 last) {
  // Without the unroll pragmas GCC stores every accumulator to the stack on each k (measured:
  // slower than BLAS); unrolled, the 24 accumulators stay in zmm registers.
  __m512 c[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) c[r][v] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < K; ++k) {
    __m512 b[V];
#pragma GCC unroll 4
    for (int v = 0; v + 1 < V; ++v) b[v] = _mm512_loadu_ps(B + k * ldb + 16 * v);
    b[V - 1] = _mm512_maskz_loadu_ps(last, B + k * ldb + 16 * (V - 1));
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(AT ? A[k * lda + r] : A[r * lda + k]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) c[r][v] = _mm512_fmadd_ps(a, b[v], c[r][v]);
    }
  }
  const __m512 scale = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      float* p = C + r * ldc + 16 * v;
      const __mmask16 m = v + 1 < V ? __mmask16(0xFFFF) : last;
      __m512 x = _mm512_mul_ps(c[r][v], scale);
      if (accumulate) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, p));
      _mm512_mask_storeu_ps(p, m, x);
    }
  }
}

template <int R, bool AT>
inline void rows(int64_t V, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
                 int64_t ldb, float* C, int64_t ldc, bool accumulate, __mmask16 last) {
  switch (V) {
    case 1:
      return block<R, 1, AT>(K, alpha, A, lda, B, ldb, C, ldc, accumulate, last);
    case 2:
      return block<R, 2, AT>(K, alpha, A, lda, B, ldb, C, ldc, accumulate, last);
    case 3:
      return block<R, 3, AT>(K, alpha, A, lda, B, ldb, C, ldc, accumulate, last);
    default:
      return block<R, 4, AT>(K, alpha, A, lda, B, ldb, C, ldc, accumulate, last);
  }
}

template <bool AT>
inline void gemm(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  // Row i of op(A) starts at A + i * lda, or at column i of A (A + i) when transposed.
  const int64_t row_step = AT ? 1 : lda;
  for (int64_t j = 0; j < N; j += 64) {
    const int64_t n = std::min<int64_t>(64, N - j), V = (n + 15) / 16;
    const __mmask16 last = static_cast<__mmask16>((1u << (n - 16 * (V - 1))) - 1);
    // Rows in blocks of 6, then one block of the 1-5 rows left.
    using RowBlock = void (*)(int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                              float*, int64_t, bool, __mmask16);
    constexpr RowBlock kRows[7] = {nullptr,     rows<1, AT>, rows<2, AT>, rows<3, AT>,
                                   rows<4, AT>, rows<5, AT>, rows<6, AT>};
    for (int64_t i = 0; i < M; i += 6) {
      kRows[std::min<int64_t>(6, M - i)](V, K, alpha, A + i * row_step, lda, B + j, ldb,
                                         C + i * ldc + j, ldc, accumulate, last);
    }
  }
}
}  // namespace tile_detail

// C = alpha op(A) B (+ C).
inline void tile_gemm(bool a_transposed, int64_t M, int64_t N, int64_t K, float alpha,
                      const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
                      int64_t ldc, bool accumulate) {
  if (a_transposed) {
    tile_detail::gemm<true>(M, N, K, alpha, A, lda, B, ldb, C, ldc, accumulate);
  } else {
    tile_detail::gemm<false>(M, N, K, alpha, A, lda, B, ldb, C, ldc, accumulate);
  }
}
#else
inline constexpr bool kTileGemm = false;
// Declared so callers compile; they only call it where kTileGemm, which is false here.
void tile_gemm(bool a_transposed, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, bool accumulate);
#endif

}  // namespace trillion::cpu
