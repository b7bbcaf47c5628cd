// exp() that the compiler can vectorise: Cody-Waite range reduction x = n ln2 + r, |r| <= ln2/2,
// a degree-6 Taylor polynomial for e^r (truncation r^7/7! < 1.3e-7 relative, about one float
// ulp), and 2^n assembled in the exponent bits. glibc's expf is not vectorised without
// -ffast-math, and the SwiGLU, softmax and cross-entropy loops are dominated by it. float only:
// the double kernels (the reference for gradient checks) keep std::exp.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace trillion::cpu {

#pragma omp declare simd
inline float exp_fast(float x) {
  if (x != x) return x;  // NaN stays NaN
  // Below ln(2^-126) results are denormal: flush to zero (softmax and sigmoid do not care).
  const float xc = x < -87.33654f ? -87.33654f : (x > 88.72283f ? 88.72283f : x);
  const float n = std::nearbyint(xc * 1.44269504088896341f);
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;  // ln2 = hi - lo, exact hi*n
  float p = 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return x < -87.33654f ? 0.0f : p * scale;
}

template <typename T>
inline T exp_any(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return exp_fast(x);
  } else {
    return std::exp(x);
  }
}

}  // namespace trillion::cpu
