// CPU backend: GEMM through OpenBLAS, the elementwise/bookkeeping ops, AdamW, and the factory.
#include "backend/cpu/cpu_backend.h"

#include <fmt/format.h>

#include <cmath>

namespace trillion {

std::unique_ptr<Backend> make_cpu_backend(MemoryTracker& tracker) {
  return std::make_unique<cpu::CpuBackend>(tracker);
}

namespace cpu {

Matrix as_matrix(const Tensor& t) {
  TRILLION_CHECK(t.rank() >= 1, "scalar tensor where a matrix was expected");
  const int r = t.rank();
  TRILLION_CHECK(t.stride(r - 1) == 1, "columns must be contiguous, got " + t.shape_string());
  Matrix m;
  m.cols = t.size(r - 1);
  m.rows = t.numel() / std::max<int64_t>(m.cols, 1);
  m.ld = r >= 2 ? t.stride(r - 2) : m.cols;
  // Leading dims must fold into evenly strided rows.
  for (int d = 0; d + 2 < r; ++d) {
    TRILLION_CHECK(t.stride(d) == t.stride(d + 1) * t.size(d + 1),
                   "leading dims do not fold into rows: " + t.shape_string());
  }
  return m;
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  TRILLION_CHECK(a.dtype() == b.dtype(), fmt::format("{}: dtype mismatch {} vs {}", op,
                                                     dtype_name(a.dtype()), dtype_name(b.dtype())));
}

CpuBackend::CpuBackend(MemoryTracker& tracker) : tracker_(tracker) {}

Tensor CpuBackend::scratch(DType dtype, int64_t count) {
  const int64_t bytes = count * static_cast<int64_t>(dtype_size(dtype));
  if (static_cast<int64_t>(scratch_.bytes()) < bytes) {
    scratch_ = Buffer();  // release first so the peak is not old + new
    scratch_ = Buffer(tracker_, MemoryCategory::workspace, DType::f64, (bytes + 7) / 8);
  }
  return Tensor(scratch_.raw(), dtype, {count});
}

namespace {

struct GemmDims {
  int64_t M, N, K;
};

GemmDims gemm_dims(const Tensor& C, bool ta, bool tb, const Tensor& A, const Tensor& B) {
  const int r = C.rank();
  const int64_t M = C.size(r - 2), N = C.size(r - 1);
  const int64_t K = ta ? A.size(A.rank() - 2) : A.size(A.rank() - 1);
  const int64_t am = ta ? A.size(A.rank() - 1) : A.size(A.rank() - 2);
  const int64_t bk = tb ? B.size(B.rank() - 1) : B.size(B.rank() - 2);
  const int64_t bn = tb ? B.size(B.rank() - 2) : B.size(B.rank() - 1);
  TRILLION_CHECK(am == M && bk == K && bn == N,
                 fmt::format("gemm shapes: C {} = op(A {}) op(B {}), trans {} {}", C.shape_string(),
                             A.shape_string(), B.shape_string(), ta, tb));
  return {M, N, K};
}

}  // namespace

void CpuBackend::gemm(Tensor C, bool ta, bool tb, const Tensor& A, const Tensor& B, double alpha,
                      double beta) {
  TRILLION_CHECK(C.rank() == 2 && A.rank() == 2 && B.rank() == 2, "gemm takes 2-D views");
  check_same_dtype(C, A, "gemm");
  check_same_dtype(C, B, "gemm");
  const GemmDims d = gemm_dims(C, ta, tb, A, B);
  dispatch(C.dtype(), [&](auto tag) {
    using T = decltype(tag);
    blas_gemm<T>(ta, tb, d.M, d.N, d.K, static_cast<T>(alpha), A.data<T>(), A.stride(0),
                 B.data<T>(), B.stride(0), static_cast<T>(beta), C.data<T>(), C.stride(0));
  });
}

void CpuBackend::gemm_batched(Tensor C, bool ta, bool tb, const Tensor& A, const Tensor& B,
                              double alpha, double beta) {
  TRILLION_CHECK(C.rank() == 3 && A.rank() == 3 && B.rank() == 3, "gemm_batched takes 3-D views");
  TRILLION_CHECK(C.size(0) == A.size(0) && C.size(0) == B.size(0), "gemm_batched batch sizes");
  check_same_dtype(C, A, "gemm_batched");
  check_same_dtype(C, B, "gemm_batched");
  const GemmDims d = gemm_dims(C, ta, tb, A, B);
  dispatch(C.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t batch = C.size(0);
    // One single-threaded BLAS call per batch entry (OpenBLAS runs serially inside a parallel
    // region); parallel over the batch.
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < batch; ++i) {
      blas_gemm<T>(ta, tb, d.M, d.N, d.K, static_cast<T>(alpha), A.data<T>() + i * A.stride(0),
                   A.stride(1), B.data<T>() + i * B.stride(0), B.stride(1), static_cast<T>(beta),
                   C.data<T>() + i * C.stride(0), C.stride(1));
    }
  });
}

void CpuBackend::adamw_update(Tensor param, const Tensor& grad, Tensor m, Tensor v,
                              const AdamWParams& p) {
  TRILLION_CHECK(param.is_contiguous() && grad.is_contiguous() && m.is_contiguous() &&
                     v.is_contiguous() && param.numel() == grad.numel() &&
                     param.numel() == m.numel() && param.numel() == v.numel(),
                 "adamw_update: tensors must be contiguous and equally sized");
  // Gradients in the parameters' dtype, or bf16 (precision.grad_dtype, parallel/bf16_gradients.h)
  // widened element by element.
  const bool bf16_grad = grad.dtype() == DType::bf16;
  TRILLION_CHECK(bf16_grad || grad.dtype() == param.dtype(), "adamw_update: gradient dtype");
  dispatch(param.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* w = param.data<T>();
    const T* g32 = bf16_grad ? nullptr : grad.data<T>();
    const bf16* g16 = bf16_grad ? static_cast<const bf16*>(grad.raw()) : nullptr;
    T* m1 = m.data<T>();
    T* m2 = v.data<T>();
    const T b1 = static_cast<T>(p.beta1), b2 = static_cast<T>(p.beta2);
    const T lr = static_cast<T>(p.lr), eps = static_cast<T>(p.eps);
    const T decay = static_cast<T>(1.0 - p.lr * p.weight_decay);
    const T c1 = static_cast<T>(1.0 / (1.0 - std::pow(p.beta1, static_cast<double>(p.step))));
    const T c2 = static_cast<T>(1.0 / (1.0 - std::pow(p.beta2, static_cast<double>(p.step))));
    const int64_t n = param.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const T gi = bf16_grad ? static_cast<T>(bf16_to_float(g16[i])) : g32[i];
      m1[i] = b1 * m1[i] + (1 - b1) * gi;
      m2[i] = b2 * m2[i] + (1 - b2) * gi * gi;
      w[i] = decay * w[i] - lr * (m1[i] * c1) / (std::sqrt(m2[i] * c2) + eps);
    }
  });
}

void CpuBackend::fill(Tensor x, double value) {
  const Matrix mx = as_matrix(x);
  dispatch(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = x.data<T>();
#pragma omp parallel for schedule(static) if (mx.rows * mx.cols > 65536)
    for (int64_t r = 0; r < mx.rows; ++r) {
      for (int64_t c = 0; c < mx.cols; ++c) p[r * mx.ld + c] = static_cast<T>(value);
    }
  });
}

namespace {
template <typename X>
double widen(X x) {
  if constexpr (std::is_same_v<X, bf16>) {
    return bf16_to_float(x);
  } else {
    return static_cast<double>(x);
  }
}

template <typename D, typename S>
D convert(S s) {
  if constexpr (std::is_same_v<D, S>) {
    return s;
  } else if constexpr (std::is_same_v<D, bf16>) {
    return float_to_bf16(static_cast<float>(widen(s)));
  } else {
    return static_cast<D>(widen(s));
  }
}

}  // namespace

void CpuBackend::copy(Tensor dst, const Tensor& src) {
  const Matrix md = as_matrix(dst), ms = as_matrix(src);
  TRILLION_CHECK(md.rows == ms.rows && md.cols == ms.cols,
                 "copy: shapes " + dst.shape_string() + " and " + src.shape_string());
  dispatch_any(dst.dtype(), [&](auto dtag) {
    dispatch_any(src.dtype(), [&](auto stag) {
      using D = decltype(dtag);
      using S = decltype(stag);
      D* d = static_cast<D*>(dst.raw());
      const S* s = static_cast<const S*>(src.raw());
#pragma omp parallel for schedule(static) if (md.rows * md.cols > 65536)
      for (int64_t r = 0; r < md.rows; ++r) {
        for (int64_t c = 0; c < md.cols; ++c) d[r * md.ld + c] = convert<D>(s[r * ms.ld + c]);
      }
    });
  });
}

void CpuBackend::add(Tensor y, const Tensor& x) {
  check_same_dtype(y, x, "add");
  const Matrix my = as_matrix(y), mx = as_matrix(x);
  TRILLION_CHECK(my.rows == mx.rows && my.cols == mx.cols, "add: shapes differ");
  dispatch(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* py = y.data<T>();
    const T* px = x.data<T>();
#pragma omp parallel for schedule(static) if (my.rows * my.cols > 65536)
    for (int64_t r = 0; r < my.rows; ++r) {
#pragma omp simd
      for (int64_t c = 0; c < my.cols; ++c) py[r * my.ld + c] += px[r * mx.ld + c];
    }
  });
}

void CpuBackend::scale(Tensor x, double alpha) {
  const Matrix mx = as_matrix(x);
  dispatch(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = x.data<T>();
    const T a = static_cast<T>(alpha);
#pragma omp parallel for schedule(static) if (mx.rows * mx.cols > 65536)
    for (int64_t r = 0; r < mx.rows; ++r) {
#pragma omp simd
      for (int64_t c = 0; c < mx.cols; ++c) p[r * mx.ld + c] *= a;
    }
  });
}

double CpuBackend::sum_squares(const Tensor& x) {
  TRILLION_CHECK(x.is_contiguous(), "sum_squares needs a contiguous tensor");
  double total = 0;
  // bf16 too: a tensor-parallel run's replicated gradients live in bf16 with grad_dtype bf16.
  dispatch_any(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
    const int64_t n = x.numel();
    auto value = [](T x) {
      if constexpr (std::is_same_v<T, bf16>) {
        return static_cast<double>(bf16_to_float(x));
      } else {
        return static_cast<double>(x);
      }
    };
    // Fixed-size chunks summed in order: the result does not depend on the thread count. Inside
    // a chunk, 8 running sums (lane k takes elements k, k + 8, ...) added in a fixed tree: no
    // chain of dependent adds (one sum ran at 2-5 GB/s), the same result on any machine.
    constexpr int64_t kChunk = 1 << 14, kLanes = 8;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    std::vector<double> partial(chunks);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
      double lane[kLanes] = {};
      const int64_t end = std::min(n, (c + 1) * kChunk);
      int64_t i = c * kChunk;
      for (; i + kLanes <= end; i += kLanes) {
        for (int64_t k = 0; k < kLanes; ++k) {
          const double v = value(p[i + k]);
          lane[k] += v * v;
        }
      }
      for (int64_t k = 0; i < end; ++i, ++k) {
        const double v = value(p[i]);
        lane[k] += v * v;
      }
      partial[c] =
          ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    }
    for (double s : partial) total += s;
  });
  return total;
}

}  // namespace cpu
}  // namespace trillion
