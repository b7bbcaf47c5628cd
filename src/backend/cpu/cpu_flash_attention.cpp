// Tiled causal grouped-query attention on the CPU, FlashAttention-2 formulation (Dao,
// 2307.08691, Alg. 1 and 2). Forward: for each (batch, head, query block) keep a running row max
// m, row sum l and unnormalised output; visit key/value blocks left of the diagonal only; save
// lse = m + log l. Backward: for each (batch, kv group) — which owns dK, dV of the group and dQ
// of its heads, so no two threads write the same gradient — recompute P = exp(S - lse) per tile,
// with D = rowsum(dO * O):  dV += P^T dO,  dS = P * (dO V^T - D),  dQ += scale dS K,
// dK += scale dS^T Q. Memory beyond inputs and outputs: lse (B*NH*T) and per-thread tiles plus
// one T-vector — linear in T.
#include <unistd.h>

#include <cmath>
#include <limits>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/vec_exp.h"

namespace trillion::cpu {

AttentionBlocks choose_attention_blocks(int64_t head_dim, int64_t seq_len, size_t element_bytes,
                                        AttentionBlocks requested) {
  long l2 = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (l2 <= 0) l2 = 1 << 20;
  int64_t b = 256;
  while (b > 16 && static_cast<size_t>(4 * b * head_dim + 2 * b * b) * element_bytes >
                       static_cast<size_t>(l2) / 4) {
    b /= 2;
  }
  while (b > 16 && 4 * b > seq_len) b /= 2;
  return {requested.q > 0 ? requested.q : b, requested.kv > 0 ? requested.kv : b};
}

void CpuBackend::flash_attention_forward(Tensor out, Tensor lse, const Tensor& qkv,
                                         const AttentionShape& s, AttentionBlocks requested) {
  check_same_dtype(out, qkv, "flash_attention_forward");
  check_same_dtype(lse, qkv, "flash_attention_forward");
  const Matrix mq = as_matrix(qkv), mo = as_matrix(out);
  TRILLION_CHECK(mq.rows == s.B * s.T && mq.cols == s.qkv_width() && mo.cols == s.NH * s.HD &&
                     lse.numel() == s.B * s.NH * s.T && s.NH % s.KV == 0,
                 "flash_attention_forward shapes");
  const AttentionBlocks bl = choose_attention_blocks(s.HD, s.T, dtype_size(qkv.dtype()), requested);
  const int64_t Br = bl.q, Bc = bl.kv, nq = (s.T + Br - 1) / Br;
  const int nthreads = threads();
  const int64_t per_thread = Br * Bc + Br * s.HD + 2 * Br;
  Tensor work = scratch(qkv.dtype(), nthreads * per_thread);
  dispatch(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pq = qkv.data<T>();
    T* po = out.data<T>();
    T* pl = lse.data<T>();
    T* pw = work.data<T>();
    const int64_t group = s.NH / s.KV;
    const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(s.HD)));
    const T neg_inf = -std::numeric_limits<T>::infinity();
#pragma omp parallel for collapse(3) schedule(dynamic) num_threads(nthreads)
    for (int64_t b = 0; b < s.B; ++b) {
      for (int64_t h = 0; h < s.NH; ++h) {
        for (int64_t qb = 0; qb < nq; ++qb) {
          T* S = pw + omp_get_thread_num() * per_thread;  // [Br, Bc]
          T* acc = S + Br * Bc;                           // [Br, HD]
          T* m = acc + Br * s.HD;                         // [Br]
          T* l = m + Br;                                  // [Br]
          const int64_t q0 = qb * Br, rows = std::min(Br, s.T - q0);
          const int64_t row0 = b * s.T;
          const T* q = pq + (row0 + q0) * mq.ld + h * s.HD;
          const T* kbase = pq + row0 * mq.ld + (s.NH + h / group) * s.HD;
          const T* vbase = pq + row0 * mq.ld + (s.NH + s.KV + h / group) * s.HD;
          for (int64_t r = 0; r < rows; ++r) m[r] = neg_inf, l[r] = 0;
          for (int64_t i = 0; i < rows * s.HD; ++i) acc[i] = 0;
          // Key blocks that hold any key <= the block's last query: the causal skip.
          for (int64_t k0 = 0; k0 < q0 + rows; k0 += Bc) {
            const int64_t cols = std::min(Bc, s.T - k0);
            blas_gemm<T>(false, true, rows, cols, s.HD, scale, q, mq.ld, kbase + k0 * mq.ld, mq.ld,
                         T(0), S, Bc);
            for (int64_t r = 0; r < rows; ++r) {
              T* sr = S + r * Bc;
              const int64_t visible = std::min(cols, q0 + r - k0 + 1);  // keys <= query
              T mx = m[r];
              for (int64_t c = 0; c < visible; ++c) mx = std::max(mx, sr[c]);
              const T correction = exp_any<T>(m[r] - mx);
              T sum = 0;
#pragma omp simd reduction(+ : sum)
              for (int64_t c = 0; c < visible; ++c) sum += sr[c] = exp_any<T>(sr[c] - mx);
              for (int64_t c = std::max<int64_t>(visible, 0); c < cols; ++c) sr[c] = 0;
              l[r] = l[r] * correction + sum;
              m[r] = mx;
              T* ar = acc + r * s.HD;
              for (int64_t d = 0; d < s.HD; ++d) ar[d] *= correction;
            }
            blas_gemm<T>(false, false, rows, s.HD, cols, T(1), S, Bc, vbase + k0 * mq.ld, mq.ld,
                         T(1), acc, s.HD);
          }
          for (int64_t r = 0; r < rows; ++r) {
            T* o = po + (row0 + q0 + r) * mo.ld + h * s.HD;
            const T inv = T(1) / l[r];
            for (int64_t d = 0; d < s.HD; ++d) o[d] = acc[r * s.HD + d] * inv;
            pl[(b * s.NH + h) * s.T + q0 + r] = m[r] + std::log(l[r]);
          }
        }
      }
    }
  });
}

void CpuBackend::flash_attention_backward(Tensor dqkv, const Tensor& dout, const Tensor& out,
                                          const Tensor& qkv, const Tensor& lse,
                                          const AttentionShape& s, AttentionBlocks requested) {
  check_same_dtype(dqkv, qkv, "flash_attention_backward");
  check_same_dtype(dout, qkv, "flash_attention_backward");
  const Matrix mq = as_matrix(qkv), md = as_matrix(dqkv), mg = as_matrix(dout), mo = as_matrix(out);
  TRILLION_CHECK(md.rows == mq.rows && md.cols == mq.cols && mg.cols == s.NH * s.HD &&
                     mo.cols == s.NH * s.HD && lse.numel() == s.B * s.NH * s.T,
                 "flash_attention_backward shapes");
  const AttentionBlocks bl = choose_attention_blocks(s.HD, s.T, dtype_size(qkv.dtype()), requested);
  const int64_t Br = bl.q, Bc = bl.kv;
  const int nthreads = threads();
  const int64_t per_thread = 2 * Br * Bc + s.T;
  Tensor work = scratch(qkv.dtype(), nthreads * per_thread);
  dispatch(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pq = qkv.data<T>();
    const T* pg = dout.data<T>();
    const T* po = out.data<T>();
    const T* pl = lse.data<T>();
    T* pd = dqkv.data<T>();
    T* pw = work.data<T>();
    const int64_t group = s.NH / s.KV;
    const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(s.HD)));
#pragma omp parallel for collapse(2) schedule(dynamic) num_threads(nthreads)
    for (int64_t b = 0; b < s.B; ++b) {
      for (int64_t g = 0; g < s.KV; ++g) {
        T* P = pw + omp_get_thread_num() * per_thread;  // [Br, Bc]
        T* dP = P + Br * Bc;                            // [Br, Bc]
        T* D = dP + Br * Bc;                            // [T]
        const int64_t row0 = b * s.T;
        const T* k = pq + row0 * mq.ld + (s.NH + g) * s.HD;
        const T* v = pq + row0 * mq.ld + (s.NH + s.KV + g) * s.HD;
        T* dk = pd + row0 * md.ld + (s.NH + g) * s.HD;
        T* dv = pd + row0 * md.ld + (s.NH + s.KV + g) * s.HD;
        for (int64_t t = 0; t < s.T; ++t) {
          for (int64_t d = 0; d < s.HD; ++d) dk[t * md.ld + d] = dv[t * md.ld + d] = 0;
        }
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          const T* q = pq + row0 * mq.ld + h * s.HD;
          const T* d_o = pg + row0 * mg.ld + h * s.HD;
          const T* o = po + row0 * mo.ld + h * s.HD;
          const T* lrow = pl + (b * s.NH + h) * s.T;
          T* dq = pd + row0 * md.ld + h * s.HD;
          for (int64_t t = 0; t < s.T; ++t) {
            T acc = 0;
            for (int64_t d = 0; d < s.HD; ++d) acc += d_o[t * mg.ld + d] * o[t * mo.ld + d];
            D[t] = acc;
            for (int64_t d = 0; d < s.HD; ++d) dq[t * md.ld + d] = 0;
          }
          for (int64_t q0 = 0; q0 < s.T; q0 += Br) {
            const int64_t rows = std::min(Br, s.T - q0);
            for (int64_t k0 = 0; k0 < q0 + rows; k0 += Bc) {
              const int64_t cols = std::min(Bc, s.T - k0);
              blas_gemm<T>(false, true, rows, cols, s.HD, scale, q + q0 * mq.ld, mq.ld,
                           k + k0 * mq.ld, mq.ld, T(0), P, Bc);
              for (int64_t r = 0; r < rows; ++r) {
                const int64_t visible = std::min(cols, q0 + r - k0 + 1);
                T* pr = P + r * Bc;
                const T l = lrow[q0 + r];
#pragma omp simd
                for (int64_t c = 0; c < std::max<int64_t>(visible, 0); ++c) {
                  pr[c] = exp_any<T>(pr[c] - l);
                }
                for (int64_t c = std::max<int64_t>(visible, 0); c < cols; ++c) pr[c] = 0;
              }
              // dV_j += P^T dO_i ; dP = dO_i V_j^T
              blas_gemm<T>(true, false, cols, s.HD, rows, T(1), P, Bc, d_o + q0 * mg.ld, mg.ld,
                           T(1), dv + k0 * md.ld, md.ld);
              blas_gemm<T>(false, true, rows, cols, s.HD, T(1), d_o + q0 * mg.ld, mg.ld,
                           v + k0 * mq.ld, mq.ld, T(0), dP, Bc);
              for (int64_t r = 0; r < rows; ++r) {
                for (int64_t c = 0; c < cols; ++c) {
                  dP[r * Bc + c] = P[r * Bc + c] * (dP[r * Bc + c] - D[q0 + r]);
                }
              }
              // dQ_i += scale dS K_j ; dK_j += scale dS^T Q_i
              blas_gemm<T>(false, false, rows, s.HD, cols, scale, dP, Bc, k + k0 * mq.ld, mq.ld,
                           T(1), dq + q0 * md.ld, md.ld);
              blas_gemm<T>(true, false, cols, s.HD, rows, scale, dP, Bc, q + q0 * mq.ld, mq.ld,
                           T(1), dk + k0 * md.ld, md.ld);
            }
          }
        }
      }
    }
  });
}

}  // namespace trillion::cpu
