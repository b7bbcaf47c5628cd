// CPU kernels of the per-token layers: embedding, RMSNorm, RoPE, SwiGLU, cross-entropy.
// Row-parallel where rows are independent; weight gradients are column-parallel (see
// cpu_backend.h) so they are bitwise independent of the thread count.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/vec_exp.h"

namespace trillion::cpu {

namespace {
// Splits [0, n) into omp_get_num_threads() contiguous chunks; returns this thread's chunk.
inline void thread_range(int64_t n, int64_t& begin, int64_t& end) {
  const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
  begin = n * t / nt;
  end = n * (t + 1) / nt;
}

void check_tokens(const int32_t* tokens, int64_t n, int64_t vocab, const char* what,
                  bool allow_ignored = false) {
  for (int64_t i = 0; i < n; ++i) {
    if (allow_ignored && tokens[i] == kIgnoredTarget) continue;
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      throw Error(fmt::format("{} id {} at position {} is outside the vocabulary [0, {})", what,
                              tokens[i], i, vocab));
    }
  }
}
}  // namespace

void CpuBackend::embedding_forward(Tensor out, const int32_t* tokens, const Tensor& table) {
  check_same_dtype(out, table, "embedding_forward");
  const Matrix mo = as_matrix(out), mt = as_matrix(table);
  TRILLION_CHECK(mo.cols == mt.cols, "embedding width mismatch");
  check_tokens(tokens, mo.rows, mt.rows, "token");
  dispatch(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = out.data<T>();
    const T* w = table.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < mo.rows; ++n) {
      const T* row = w + tokens[n] * mt.ld;
      for (int64_t c = 0; c < mo.cols; ++c) o[n * mo.ld + c] = row[c];
    }
  });
}

void CpuBackend::embedding_backward_weight(Tensor dtable, const int32_t* tokens,
                                           const Tensor& dout) {
  check_same_dtype(dtable, dout, "embedding_backward_weight");
  const Matrix mt = as_matrix(dtable), mo = as_matrix(dout);
  TRILLION_CHECK(mo.cols == mt.cols, "embedding width mismatch");
  check_tokens(tokens, mo.rows, mt.rows, "token");
  dispatch(dtable.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* dw = dtable.data<T>();
    const T* g = dout.data<T>();
#pragma omp parallel
    {
      int64_t c0, c1;
      thread_range(mt.cols, c0, c1);
      for (int64_t n = 0; n < mo.rows; ++n) {
        T* row = dw + tokens[n] * mt.ld;
        const T* gr = g + n * mo.ld;
        for (int64_t c = c0; c < c1; ++c) row[c] += gr[c];
      }
    }
  });
}

void CpuBackend::vocab_embedding_forward(Tensor out, const int32_t* tokens, const Tensor& rows,
                                         int64_t first) {
  check_same_dtype(out, rows, "vocab_embedding_forward");
  const Matrix mo = as_matrix(out), mt = as_matrix(rows);
  TRILLION_CHECK(mo.cols == mt.cols, "embedding width mismatch");
  check_tokens(tokens, mo.rows, INT32_MAX, "token");
  dispatch(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = out.data<T>();
    const T* w = rows.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < mo.rows; ++n) {
      const int64_t r = tokens[n] - first;
      const bool mine = r >= 0 && r < mt.rows;
      for (int64_t c = 0; c < mo.cols; ++c) o[n * mo.ld + c] = mine ? w[r * mt.ld + c] : T(0);
    }
  });
}

void CpuBackend::vocab_embedding_backward_weight(Tensor drows, const int32_t* tokens,
                                                 const Tensor& dout, int64_t first) {
  check_same_dtype(drows, dout, "vocab_embedding_backward_weight");
  const Matrix mt = as_matrix(drows), mo = as_matrix(dout);
  TRILLION_CHECK(mo.cols == mt.cols, "embedding width mismatch");
  dispatch(drows.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* dw = drows.data<T>();
    const T* g = dout.data<T>();
#pragma omp parallel
    {
      int64_t c0, c1;
      thread_range(mt.cols, c0, c1);
      for (int64_t n = 0; n < mo.rows; ++n) {
        const int64_t r = tokens[n] - first;
        if (r < 0 || r >= mt.rows) continue;
        T* row = dw + r * mt.ld;
        const T* gr = g + n * mo.ld;
        for (int64_t c = c0; c < c1; ++c) row[c] += gr[c];
      }
    }
  });
}

void CpuBackend::rmsnorm_forward(Tensor out, Tensor rstd, const Tensor& x, const Tensor& w,
                                 double eps) {
  check_same_dtype(out, x, "rmsnorm_forward");
  const Matrix mo = as_matrix(out), mx = as_matrix(x);
  TRILLION_CHECK(
      mo.rows == mx.rows && mo.cols == mx.cols && w.numel() == mx.cols && rstd.numel() == mx.rows,
      "rmsnorm_forward shapes");
  dispatch(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    const T* pw = w.data<T>();
    T* po = out.data<T>();
    T* pr = rstd.data<T>();
    const int64_t C = mx.cols;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < mx.rows; ++n) {
      const T* xr = px + n * mx.ld;
      T ss = 0;
#pragma omp simd reduction(+ : ss)
      for (int64_t c = 0; c < C; ++c) ss += xr[c] * xr[c];
      const T r = static_cast<T>(1.0 / std::sqrt(static_cast<double>(ss) / C + eps));
      pr[n] = r;
      T* orow = po + n * mo.ld;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) orow[c] = xr[c] * r * pw[c];
    }
  });
}

void CpuBackend::rmsnorm_backward_input(Tensor dx, const Tensor& dout, const Tensor& x,
                                        const Tensor& w, const Tensor& rstd) {
  check_same_dtype(dx, x, "rmsnorm_backward_input");
  const Matrix md = as_matrix(dx), mg = as_matrix(dout), mx = as_matrix(x);
  TRILLION_CHECK(md.rows == mx.rows && mg.rows == mx.rows && md.cols == mx.cols,
                 "rmsnorm_backward_input shapes");
  dispatch(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    const T* pg = dout.data<T>();
    const T* pw = w.data<T>();
    const T* pr = rstd.data<T>();
    T* pd = dx.data<T>();
    const int64_t C = mx.cols;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < mx.rows; ++n) {
      const T* xr = px + n * mx.ld;
      const T* gr = pg + n * mg.ld;
      T* dr = pd + n * md.ld;
      const T r = pr[n];
      // y_i = x_i r w_i with r = (mean(x^2) + eps)^(-1/2):
      // dx_i = r w_i g_i - x_i r^3 (1/C) sum_j g_j w_j x_j
      T dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t c = 0; c < C; ++c) dot += gr[c] * pw[c] * xr[c];
      const T k = dot * r * r * r / static_cast<T>(C);
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) dr[c] += r * pw[c] * gr[c] - xr[c] * k;
    }
  });
}

void CpuBackend::rmsnorm_backward_weight(Tensor dw, const Tensor& dout, const Tensor& x,
                                         const Tensor& rstd) {
  check_same_dtype(dw, x, "rmsnorm_backward_weight");
  const Matrix mg = as_matrix(dout), mx = as_matrix(x);
  TRILLION_CHECK(dw.numel() == mx.cols && mg.rows == mx.rows, "rmsnorm_backward_weight shapes");
  dispatch(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    const T* pg = dout.data<T>();
    const T* pr = rstd.data<T>();
    T* pd = dw.data<T>();
#pragma omp parallel
    {
      int64_t c0, c1;
      thread_range(mx.cols, c0, c1);
      for (int64_t n = 0; n < mx.rows; ++n) {
        const T* xr = px + n * mx.ld;
        const T* gr = pg + n * mg.ld;
        const T r = pr[n];
        for (int64_t c = c0; c < c1; ++c) pd[c] += gr[c] * xr[c] * r;
      }
    }
  });
}

namespace {
// Rotates (or, with sign = -1, un-rotates) the query and key heads of one row in place.
template <typename T>
void rope_rows(T* p, int64_t ld, const T* cs, const AttentionShape& s, T sign) {
  const int64_t half = s.HD / 2, heads = s.NH + s.KV, N = s.B * s.T;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t row = s.documents.rope != nullptr ? s.documents.rope[n] : n % s.T;
    const T* cr = cs + row * s.HD;
    for (int64_t h = 0; h < heads; ++h) {
      T* x = p + n * ld + h * s.HD;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const T c = cr[i], sn = sign * cr[half + i];
        const T x1 = x[i], x2 = x[half + i];
        x[i] = x1 * c - x2 * sn;
        x[half + i] = x2 * c + x1 * sn;
      }
    }
  }
}
}  // namespace

void CpuBackend::rope_forward(Tensor qkv, const Tensor& cos_sin, const AttentionShape& s) {
  check_same_dtype(qkv, cos_sin, "rope_forward");
  const Matrix m = as_matrix(qkv);
  TRILLION_CHECK(m.rows == s.B * s.T && m.cols == s.qkv_width() && s.HD % 2 == 0 &&
                     cos_sin.numel() >= s.T * s.HD,
                 "rope_forward shapes");
  dispatch(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    rope_rows<T>(qkv.data<T>(), m.ld, cos_sin.data<T>(), s, T(1));
  });
}

void CpuBackend::rope_backward(Tensor dqkv, const Tensor& cos_sin, const AttentionShape& s) {
  check_same_dtype(dqkv, cos_sin, "rope_backward");
  const Matrix m = as_matrix(dqkv);
  TRILLION_CHECK(m.rows == s.B * s.T && m.cols == s.qkv_width(), "rope_backward shapes");
  dispatch(dqkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    rope_rows<T>(dqkv.data<T>(), m.ld, cos_sin.data<T>(), s, T(-1));
  });
}

void CpuBackend::swiglu_forward(Tensor out, const Tensor& gate_up) {
  check_same_dtype(out, gate_up, "swiglu_forward");
  const Matrix mo = as_matrix(out), mi = as_matrix(gate_up);
  TRILLION_CHECK(mi.rows == mo.rows && mi.cols == 2 * mo.cols, "swiglu_forward shapes");
  dispatch(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pi = gate_up.data<T>();
    T* po = out.data<T>();
    const int64_t F = mo.cols;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < mo.rows; ++n) {
      const T* g = pi + n * mi.ld;
      const T* u = g + F;
      T* o = po + n * mo.ld;
#pragma omp simd
      for (int64_t i = 0; i < F; ++i) o[i] = g[i] / (T(1) + exp_any<T>(-g[i])) * u[i];
    }
  });
}

void CpuBackend::swiglu_backward(Tensor dgate_up, const Tensor& dout, const Tensor& gate_up) {
  check_same_dtype(dgate_up, gate_up, "swiglu_backward");
  const Matrix md = as_matrix(dgate_up), mg = as_matrix(dout), mi = as_matrix(gate_up);
  TRILLION_CHECK(md.rows == mi.rows && md.cols == mi.cols && mg.cols * 2 == mi.cols,
                 "swiglu_backward shapes");
  dispatch(gate_up.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pi = gate_up.data<T>();
    const T* pg = dout.data<T>();
    T* pd = dgate_up.data<T>();
    const int64_t F = mg.cols;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < mi.rows; ++n) {
      const T* g = pi + n * mi.ld;
      const T* u = g + F;
      const T* d = pg + n * mg.ld;
      T* dg = pd + n * md.ld;
      T* du = dg + F;
#pragma omp simd
      for (int64_t i = 0; i < F; ++i) {
        const T sig = T(1) / (T(1) + exp_any<T>(-g[i]));
        const T silu = g[i] * sig;
        du[i] = d[i] * silu;
        dg[i] = d[i] * u[i] * sig * (T(1) + g[i] * (T(1) - sig));
      }
    }
  });
}

void CpuBackend::cross_entropy_forward(Tensor losses, Tensor lse, const Tensor& logits,
                                       const int32_t* targets) {
  check_same_dtype(losses, logits, "cross_entropy_forward");
  const Matrix m = as_matrix(logits);
  TRILLION_CHECK(losses.numel() == m.rows && lse.numel() == m.rows, "cross_entropy_forward shapes");
  check_tokens(targets, m.rows, m.cols, "target", /*allow_ignored=*/true);
  dispatch(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pl = logits.data<T>();
    T* ploss = losses.data<T>();
    T* plse = lse.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < m.rows; ++n) {
      const T* row = pl + n * m.ld;
      T mx = row[0];
      for (int64_t v = 1; v < m.cols; ++v) mx = std::max(mx, row[v]);
      T sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t v = 0; v < m.cols; ++v) sum += exp_any<T>(row[v] - mx);
      plse[n] = mx + std::log(sum);
      ploss[n] = targets[n] == kIgnoredTarget ? T(0) : plse[n] - row[targets[n]];
    }
  });
}

void CpuBackend::cross_entropy_backward(Tensor logits, const Tensor& lse, const int32_t* targets,
                                        double scale) {
  check_same_dtype(logits, lse, "cross_entropy_backward");
  const Matrix m = as_matrix(logits);
  TRILLION_CHECK(lse.numel() == m.rows, "cross_entropy_backward shapes");
  dispatch(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* pl = logits.data<T>();
    const T* plse = lse.data<T>();
    const T a = static_cast<T>(scale);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < m.rows; ++n) {
      T* row = pl + n * m.ld;
      if (targets[n] == kIgnoredTarget) {
        std::fill_n(row, m.cols, T(0));
        continue;
      }
      const T l = plse[n];
#pragma omp simd
      for (int64_t v = 0; v < m.cols; ++v) row[v] = a * exp_any<T>(row[v] - l);
      row[targets[n]] -= a;
    }
  });
}

void CpuBackend::vocab_cross_entropy_forward(Tensor stats, const Tensor& logits,
                                             const int32_t* targets, int64_t first) {
  const Matrix m = as_matrix(logits);
  TRILLION_CHECK(stats.dtype() == DType::f64 && stats.numel() == 3 * m.rows,
                 "vocab_cross_entropy_forward: stats must be f64 [n, 3]");
  dispatch(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pl = logits.data<T>();
    double* ps = stats.data<double>();
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < m.rows; ++n) {
      const T* row = pl + n * m.ld;
      double mx = static_cast<double>(row[0]);
      for (int64_t v = 1; v < m.cols; ++v) mx = std::max(mx, static_cast<double>(row[v]));
      double sum = 0;
      for (int64_t v = 0; v < m.cols; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
      const int64_t t = targets[n] - first;
      ps[3 * n] = mx;
      ps[3 * n + 1] = sum;
      ps[3 * n + 2] = t >= 0 && t < m.cols ? static_cast<double>(row[t]) : 0.0;
    }
  });
}

void CpuBackend::vocab_cross_entropy_backward(Tensor logits, const Tensor& lse,
                                              const int32_t* targets, int64_t first, double scale) {
  check_same_dtype(logits, lse, "vocab_cross_entropy_backward");
  const Matrix m = as_matrix(logits);
  TRILLION_CHECK(lse.numel() == m.rows, "vocab_cross_entropy_backward shapes");
  dispatch(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* pl = logits.data<T>();
    const T* plse = lse.data<T>();
    const T a = static_cast<T>(scale);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < m.rows; ++n) {
      T* row = pl + n * m.ld;
      if (targets[n] == kIgnoredTarget) {
        std::fill_n(row, m.cols, T(0));
        continue;
      }
      const T l = plse[n];
#pragma omp simd
      for (int64_t v = 0; v < m.cols; ++v) row[v] = a * exp_any<T>(row[v] - l);
      const int64_t t = targets[n] - first;
      if (t >= 0 && t < m.cols) row[t] -= a;
    }
  });
}

}  // namespace trillion::cpu
