// See hadamard.h.
#include "precision/hadamard.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "core/philox.h"

namespace trillion::precision {

RandomHadamard::RandomHadamard(int64_t size, uint64_t seed) : size_(size) {
  if (size < 2 || size > 256 || (size & (size - 1)) != 0) {
    throw Error(fmt::format(
        "random Hadamard transform size {}: expected a power of two from 2 to 256 (NVIDIA's "
        "NVFP4 recipe uses 16)",
        size));
  }
  const Philox rng(seed, "precision:wgrad_rht");
  signs_.resize(size);
  for (int64_t j = 0; j < size; ++j) signs_[j] = rng.below(j, 2) == 0 ? 1.0 : -1.0;
}

std::vector<double> RandomHadamard::matrix() const {
  // Sylvester's construction: H[i][j] = (-1)^popcount(i & j).
  const double norm = 1.0 / std::sqrt(static_cast<double>(size_));
  std::vector<double> r(size_ * size_);
  for (int64_t i = 0; i < size_; ++i) {
    for (int64_t j = 0; j < size_; ++j) {
      const bool odd = __builtin_popcountll(static_cast<uint64_t>(i & j)) & 1;
      r[i * size_ + j] = signs_[i] * (odd ? -norm : norm);
    }
  }
  return r;
}

void RandomHadamard::apply(const float* x, int64_t rows, int64_t k, int64_t ld,
                           std::vector<float>& out) const {
  const int64_t kp = padded(k), n = size_;
  const double norm = 1.0 / std::sqrt(static_cast<double>(n));
  out.assign(rows * kp, 0.0f);
  std::vector<double> v(n);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * ld;
    for (int64_t b = 0; b < kp; b += n) {
      for (int64_t j = 0; j < n; ++j) v[j] = b + j < k ? signs_[j] * row[b + j] : 0.0;
      // (v H)_j = sum_i v_i (-1)^popcount(i & j): log2(n) butterfly stages.
      for (int64_t h = 1; h < n; h *= 2) {
        for (int64_t i = 0; i < n; i += 2 * h) {
          for (int64_t j = i; j < i + h; ++j) {
            const double p = v[j], q = v[j + h];
            v[j] = p + q, v[j + h] = p - q;
          }
        }
      }
      float* o = out.data() + r * kp + b;
      for (int64_t j = 0; j < n; ++j) o[j] = static_cast<float>(v[j] * norm);
    }
  }
}

}  // namespace trillion::precision
