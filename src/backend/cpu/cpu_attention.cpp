// Materialised causal grouped-query attention on the CPU: the full T x T probability matrix per
// (batch, head) is kept for backward. This is the reference the tiled (FlashAttention) kernel is
// tested against. Under a document mask (AttentionShape::documents) a row's probabilities are zero
// before its document's first key, so backward needs no mask of its own. Heads h of kv group g = h
// / (NH / KV) share K_g and V_g. Layout of qkv[N, QKV] rows: [q heads 0..NH-1 | k heads 0..KV-1 | v
// heads 0..KV-1], HD each for q and k, VD each for v (VD = HD except under MLA); out[N, NH*VD].
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/vec_exp.h"

namespace trillion::cpu {

void CpuBackend::attention_forward(Tensor out, Tensor probs, const Tensor& qkv,
                                   const AttentionShape& s) {
  check_same_dtype(out, qkv, "attention_forward");
  check_same_dtype(probs, qkv, "attention_forward");
  const Matrix mq = as_matrix(qkv), mo = as_matrix(out);
  TRILLION_CHECK(mq.rows == s.B * s.T && mq.cols == s.qkv_width() && mo.cols == s.out_width() &&
                     probs.numel() == s.B * s.NH * s.T * s.T && s.NH % s.KV == 0,
                 "attention_forward shapes");
  dispatch(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pq = qkv.data<T>();
    T* pp = probs.data<T>();
    T* po = out.data<T>();
    const int64_t T_ = s.T, group = s.NH / s.KV, VD = s.v_dim();
    const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(s.HD)));
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < s.B; ++b) {
      for (int64_t h = 0; h < s.NH; ++h) {
        const int64_t g = h / group;
        const T* q = pq + b * T_ * mq.ld + h * s.HD;
        const T* k = pq + b * T_ * mq.ld + (s.NH + g) * s.HD;
        const T* v = pq + b * T_ * mq.ld + (s.NH + s.KV) * s.HD + g * VD;
        T* p = pp + (b * s.NH + h) * T_ * T_;
        blas_gemm<T>(false, true, T_, T_, s.HD, scale, q, mq.ld, k, mq.ld, T(0), p, T_);
        for (int64_t i = 0; i < T_; ++i) {
          T* row = p + i * T_;
          const int64_t lo = s.documents.first_key(b, i);  // keys [lo, i] are visible
          T mx = row[lo];
          for (int64_t j = lo + 1; j <= i; ++j) mx = std::max(mx, row[j]);
          T sum = 0;
#pragma omp simd reduction(+ : sum)
          for (int64_t j = lo; j <= i; ++j) {
            row[j] = exp_any<T>(row[j] - mx);
            sum += row[j];
          }
          const T inv = T(1) / sum;
          for (int64_t j = 0; j < lo; ++j) row[j] = T(0);
          for (int64_t j = lo; j <= i; ++j) row[j] *= inv;
          for (int64_t j = i + 1; j < T_; ++j) row[j] = T(0);
        }
        blas_gemm<T>(false, false, T_, VD, T_, T(1), p, T_, v, mq.ld, T(0),
                     po + b * T_ * mo.ld + h * VD, mo.ld);
      }
    }
  });
}

void CpuBackend::attention_backward(Tensor dqkv, const Tensor& dout, const Tensor& qkv,
                                    const Tensor& probs, const AttentionShape& s) {
  check_same_dtype(dqkv, qkv, "attention_backward");
  check_same_dtype(dout, qkv, "attention_backward");
  const Matrix mq = as_matrix(qkv), md = as_matrix(dqkv), mo = as_matrix(dout);
  TRILLION_CHECK(md.rows == mq.rows && md.cols == mq.cols && mq.cols == s.qkv_width() &&
                     mo.cols == s.out_width(),
                 "attention_backward shapes");
  const int nthreads = threads();
  Tensor work = scratch(qkv.dtype(), static_cast<int64_t>(nthreads) * s.T * s.T);
  dispatch(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pq = qkv.data<T>();
    const T* pp = probs.data<T>();
    const T* pdo = dout.data<T>();
    T* pd = dqkv.data<T>();
    T* pw = work.data<T>();
    const int64_t T_ = s.T, group = s.NH / s.KV, VD = s.v_dim();
    const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(s.HD)));
    // Parallel over (batch, kv group): the heads of a group accumulate into the same dK, dV.
#pragma omp parallel for collapse(2) schedule(static) num_threads(nthreads)
    for (int64_t b = 0; b < s.B; ++b) {
      for (int64_t g = 0; g < s.KV; ++g) {
        T* ds = pw + static_cast<int64_t>(omp_get_thread_num()) * T_ * T_;
        const int64_t row0 = b * T_;
        const T* k = pq + row0 * mq.ld + (s.NH + g) * s.HD;
        const T* v = pq + row0 * mq.ld + (s.NH + s.KV) * s.HD + g * VD;
        T* dk = pd + row0 * md.ld + (s.NH + g) * s.HD;
        T* dv = pd + row0 * md.ld + (s.NH + s.KV) * s.HD + g * VD;
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          const T* q = pq + row0 * mq.ld + h * s.HD;
          const T* p = pp + (b * s.NH + h) * T_ * T_;
          const T* d_o = pdo + row0 * mo.ld + h * VD;
          T* dq = pd + row0 * md.ld + h * s.HD;
          const T beta = h == g * group ? T(0) : T(1);
          // dV_g += P^T dO_h
          blas_gemm<T>(true, false, T_, VD, T_, T(1), p, T_, d_o, mo.ld, beta, dv, md.ld);
          // dP = dO_h V_g^T, then dS = P * (dP - rowsum(P * dP))
          blas_gemm<T>(false, true, T_, T_, VD, T(1), d_o, mo.ld, v, mq.ld, T(0), ds, T_);
          for (int64_t i = 0; i < T_; ++i) {
            const T* pr = p + i * T_;
            T* dr = ds + i * T_;
            T dot = 0;
            for (int64_t j = 0; j <= i; ++j) dot += pr[j] * dr[j];
            for (int64_t j = 0; j <= i; ++j) dr[j] = pr[j] * (dr[j] - dot);
            for (int64_t j = i + 1; j < T_; ++j) dr[j] = T(0);
          }
          // dQ_h = scale * dS K_g ; dK_g += scale * dS^T Q_h
          blas_gemm<T>(false, false, T_, s.HD, T_, scale, ds, T_, k, mq.ld, T(0), dq, md.ld);
          blas_gemm<T>(true, false, T_, s.HD, T_, scale, ds, T_, q, mq.ld, beta, dk, md.ld);
        }
      }
    }
  });
}

}  // namespace trillion::cpu
