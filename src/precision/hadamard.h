// The random Hadamard transform (RHT) of a GEMM's two operands along the reduction dimension K,
// applied before block quantisation so that one outlier inside a quantisation block is spread
// over the block instead of setting its scale and rounding the other elements to zero.
// NVIDIA's NVFP4 pre-training recipe (2509.25149, its section on RHT) applies it to the inputs of
// the wgrad GEMM only (dW = dy^T x, K along the tokens), with 16x16 matrices and one fixed random
// sign vector; Tseng et al. (2502.20586) use it to bound the variance of stochastically rounded
// MXFP4 gradients.
//   R = diag(s) H / sqrt(n), H the n x n Sylvester Hadamard matrix (entries +-1), s in {+-1}^n.
//   R R^T = I, so (a R)(b R)^T = a b^T block by block: transforming both operands' K blocks with
//   the same R leaves the exact product unchanged; only the quantisation sees other numbers.
// Invariants: n is a power of two in [2, 256]; K is padded with zeros to a multiple of n (a zero
// column of both operands adds nothing to the product); the signs depend only on (seed, position
// inside the block), never on which rows, tokens or ranks an operand holds, so every parallel
// layout and micro-batching transforms a token's values the same way.
#pragma once

#include <cstdint>
#include <vector>

namespace trillion::precision {

class RandomHadamard {
 public:
  // Signs from Philox(seed, "precision:wgrad_rht"), element j of the stream is s_j. Throws Error
  // for a size that is not a power of two in [2, 256].
  RandomHadamard(int64_t size, uint64_t seed);

  int64_t size() const { return size_; }
  const std::vector<double>& signs() const { return signs_; }
  // K rounded up to a multiple of size().
  int64_t padded(int64_t k) const { return (k + size_ - 1) / size_ * size_; }

  // R as [size, size] row-major doubles (entries +-1/sqrt(size)).
  std::vector<double> matrix() const;

  // out [rows, padded(k)] = x [rows, k] (row stride ld), each consecutive block of size()
  // columns multiplied by R from the right (zeros past k). The sums are taken in double by the
  // fast Walsh-Hadamard butterfly and rounded once to fp32.
  void apply(const float* x, int64_t rows, int64_t k, int64_t ld, std::vector<float>& out) const;

 private:
  int64_t size_;
  std::vector<double> signs_;
};

}  // namespace trillion::precision
