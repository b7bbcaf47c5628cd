// See scaled_gemm.h.
#include "precision/scaled_gemm.h"

#include <cblas.h>
#include <fmt/format.h>

#include <cmath>

#include "core/error.h"

namespace trillion::precision {

namespace {

// Block sums of E5M2 products need up to ~72 bits.
__extension__ typedef __int128 int128;

// log2 of the format's smallest subnormal: a code's value is n * 2^this for an integer n.
int quantum_exponent(MiniFormat f) {
  const MiniFormatInfo& fi = info(f);
  return 1 - fi.bias - fi.mantissa_bits;
}

// The integer n of every code (NaN codes never occur: quantize refuses non-finite input).
std::vector<int64_t> code_integers(MiniFormat f) {
  std::vector<int64_t> n(256, 0);
  for (int c = 0; c < info(f).codes; ++c) {
    const float v = decode(f, static_cast<uint8_t>(c));
    if (std::isfinite(v)) n[c] = static_cast<int64_t>(std::ldexp(v, -quantum_exponent(f)));
  }
  return n;
}

void check_shapes(const BlockQuantized& a, const BlockQuantized& b) {
  TRILLION_CHECK(a.cols == b.cols && a.tile_cols == b.tile_cols,
                 fmt::format("scaled_gemm: A [{}, {}] tiles of {} along K, B [{}, {}] tiles of {}",
                             a.rows, a.cols, a.tile_cols, b.rows, b.cols, b.tile_cols));
  TRILLION_CHECK(
      info(a.format).codes <= 256 && a.format != MiniFormat::e8m0 && b.format != MiniFormat::e8m0,
      "scaled_gemm: element formats only");
}

}  // namespace

void scaled_gemm_reference(const BlockQuantized& a, const BlockQuantized& b, float* out) {
  check_shapes(a, b);
  const std::vector<int64_t> na = code_integers(a.format), nb = code_integers(b.format);
  const int shift = quantum_exponent(a.format) + quantum_exponent(b.format);
  const int64_t K = a.cols, kb = a.tile_cols, blocks = a.tiles_across();
  for (int64_t m = 0; m < a.rows; ++m) {
    for (int64_t n = 0; n < b.rows; ++n) {
      float acc = 0;
      for (int64_t blk = 0; blk < blocks; ++blk) {
        int128 sum = 0;
        for (int64_t k = blk * kb; k < std::min(K, (blk + 1) * kb); ++k) {
          sum += static_cast<int128>(na[a.codes[m * K + k]]) * nb[b.codes[n * K + k]];
        }
        const float partial = std::ldexp(static_cast<float>(sum), shift);
        acc += partial * (a.scale(m, blk * kb) * b.scale(n, blk * kb));
      }
      out[m * b.rows + n] = acc * (a.tensor_scale * b.tensor_scale);
    }
  }
}

void scaled_gemm(const BlockQuantized& a, const BlockQuantized& b, float* out) {
  check_shapes(a, b);
  const std::vector<int64_t> na = code_integers(a.format), nb = code_integers(b.format);
  int64_t max_a = 0, max_b = 0;
  for (int64_t v : na) max_a = std::max(max_a, std::abs(v));
  for (int64_t v : nb) max_b = std::max(max_b, std::abs(v));
  const int64_t M = a.rows, N = b.rows, K = a.cols, kb = a.tile_cols;
  // Exact in double when every block sum stays below 2^53.
  if (static_cast<double>(max_a) * static_cast<double>(max_b) * static_cast<double>(kb) >= 0x1p53) {
    scaled_gemm_reference(a, b, out);
    return;
  }
  const int shift = quantum_exponent(a.format) + quantum_exponent(b.format);
  // A power of two: multiplying by it is ldexp exactly (block sums are far from under/overflow).
  const double unit = std::ldexp(1.0, shift);
  std::vector<double> ad(M * kb), bd(N * kb), p(M * N);
  std::vector<float> acc(M * N, 0.0f), sb(N);
  for (int64_t blk = 0; blk < a.tiles_across(); ++blk) {
    const int64_t k0 = blk * kb, width = std::min(K, k0 + kb) - k0;
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t k = 0; k < width; ++k)
        ad[m * width + k] = static_cast<double>(na[a.codes[m * K + k0 + k]]);
    }
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t k = 0; k < width; ++k)
        bd[n * width + k] = static_cast<double>(nb[b.codes[n * K + k0 + k]]);
    }
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(M), static_cast<int>(N),
                static_cast<int>(width), 1.0, ad.data(), static_cast<int>(width), bd.data(),
                static_cast<int>(width), 0.0, p.data(), static_cast<int>(N));
    for (int64_t n = 0; n < N; ++n) sb[n] = b.scale(n, k0);
    for (int64_t m = 0; m < M; ++m) {
      const float sa = a.scale(m, k0);
      const double* pm = p.data() + m * N;
      float* am = acc.data() + m * N;
      for (int64_t n = 0; n < N; ++n) am[n] += static_cast<float>(pm[n] * unit) * (sa * sb[n]);
    }
  }
  const float t = a.tensor_scale * b.tensor_scale;
  for (int64_t i = 0; i < M * N; ++i) out[i] = acc[i] * t;
}

}  // namespace trillion::precision
