// Shared helpers for the unit tests: random host tensors and finite-difference gradient checks.
#pragma once

#include <cmath>
#include <functional>
#include <vector>

#include "core/philox.h"
#include "core/tensor.h"

namespace trillion::testing {

inline std::vector<double> random_vector(int64_t n, uint64_t seed, double scale = 1.0) {
  std::vector<double> v(n);
  Philox rng(seed, "test");
  for (int64_t i = 0; i < n; ++i) v[i] = scale * rng.normal(i);
  return v;
}

inline Tensor host(std::vector<double>& v, std::initializer_list<int64_t> shape) {
  return Tensor(v.data(), DType::f64, shape);
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// ||analytic - numeric|| / max(||analytic||, ||numeric||) over up to `samples` elements of x
// (evenly strided), numeric by central differences of loss() with step h.
inline double gradient_error(const std::function<double()>& loss, double* x, int64_t n,
                             const double* analytic, int64_t samples = 64, double h = 1e-5) {
  const int64_t stride = std::max<int64_t>(1, n / samples);
  double diff = 0, na = 0, nn = 0;
  for (int64_t i = 0; i < n; i += stride) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    const double down = loss();
    x[i] = saved;
    const double numeric = (up - down) / (2 * h);
    diff += (analytic[i] - numeric) * (analytic[i] - numeric);
    na += analytic[i] * analytic[i];
    nn += numeric * numeric;
  }
  const double denom = std::sqrt(std::max(na, nn));
  return denom == 0 ? 0.0 : std::sqrt(diff) / denom;
}

}  // namespace trillion::testing
