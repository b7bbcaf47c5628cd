// The CPU reference backend: OpenBLAS for matrix products, OpenMP loops for everything else.
// Every kernel is a template instantiated for float and double (double is the reference for
// finite-difference gradient checks). Reductions whose result feeds parameters (norm and
// embedding weight gradients) split work by column, never by row, so results are bitwise
// independent of the thread count.
#pragma once

#include <cblas.h>
#include <omp.h>

#include <type_traits>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"

namespace trillion::cpu {

// A tensor seen as a matrix: all leading dims folded into rows; rows may be strided, columns are
// contiguous.
struct Matrix {
  int64_t rows = 0, cols = 0, ld = 0;
};
Matrix as_matrix(const Tensor& t);

// Tile sizes for the tiled attention: the largest power of two (16..256) whose working set
// (Q, O, K, V tiles and two score tiles) fits in a quarter of the L2 cache, and no larger than a
// quarter of the sequence (short sequences want several tiles per row: the causal skip and the
// thread balance need them; measured 1.9x faster at T = 256); explicit sizes win.
AttentionBlocks choose_attention_blocks(int64_t head_dim, int64_t seq_len, size_t element_bytes,
                                        AttentionBlocks requested);

// Calls f(T{}) with T = float, double or bf16 matching dtype (storage ops: copy/convert).
template <typename F>
void dispatch_any(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32:
      f(float{});
      return;
    case DType::f64:
      f(double{});
      return;
    case DType::bf16:
      f(bf16{});
      return;
  }
}

// Calls f(T{}) with T = float or double matching dtype (compute kernels); bf16 is an error, and
// no kernel is instantiated for it.
template <typename F>
void dispatch(DType dtype, F&& f) {
  dispatch_any(dtype, [&](auto tag) {
    if constexpr (std::is_same_v<decltype(tag), bf16>) {
      throw Error(std::string("CPU kernel has no ") + std::string(dtype_name(dtype)) +
                  " version; use f32 or f64 compute");
    } else {
      f(tag);
    }
  });
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op);

// Row-major BLAS GEMM for float or double.
template <typename T>
void blas_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
               const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  const auto opa = ta ? CblasTrans : CblasNoTrans;
  const auto opb = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, opa, opb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, opa, opb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(MemoryTracker& tracker);
  const char* name() const override { return "cpu"; }
  int threads() const override { return omp_get_max_threads(); }

  TRILLION_BACKEND_OVERRIDES
  AttentionTileFlops attention_tile_flops() const override { return tiles_; }

 private:
  // Scratch of at least `count` elements of `dtype`, accounted as workspace; grows, never
  // shrinks, so the peak is what the largest call needed.
  Tensor scratch(DType dtype, int64_t count);

  MemoryTracker& tracker_;
  Buffer scratch_;
  AttentionTileFlops tiles_;
};

}  // namespace trillion::cpu
