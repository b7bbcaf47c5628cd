// One (query span, key span) block of causal grouped-query attention on the CPU: the one tiled
// FlashAttention-2 loop (Dao, 2307.08691, Alg. 1 and 2) for forward and one for backward. Ring
// attention (parallel/context.h) calls it per block; the whole-sequence kernels
// (cpu_flash_attention.cpp) call it with both spans = the whole sequence. Queries and keys come
// from separate buffers and spans, and the causal mask compares global positions (key position
// <= query position), so a row may see no key of the block. Forward keeps the block's running
// max m, sum l and output per query tile, then merges (out_b = acc / l, lse_b = m + log l) into
// the caller's (out, lse) exactly (a row whose lse is -inf just takes the block's); backward
// recomputes P = exp(S - lse) from the final lse, with D = rowsum(dO * O):  dV += P^T dO,
// dS = P * (dO V^T - D),  dQ += scale dS K,  dK += scale dS^T Q.
// A document mask (AttentionShape::documents) narrows each row's visible keys to [start, q]: a key
// tile wholly before the document of the query tile's first row (hence of every row: starts do
// not decrease along a sequence) is skipped like a tile above the diagonal, and counted.
// Threads own disjoint outputs: forward (batch, head, query tile) rows; backward (batch, kv group)
// owns dK, dV of the group and dQ of its heads.
// Head dims: Q and K have HD columns per head, V and the output VD (= HD except under MLA), so
// kv rows are K [KV*HD] | V [KV*VD]; the scale is 1/sqrt(HD) whatever VD is.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/tile_gemm.h"
#include "backend/cpu/vec_exp.h"

namespace trillion::cpu {

namespace {
void check_spans(const AttentionShape& s, const AttentionSpan& q, const AttentionSpan& k,
                 const char* op) {
  TRILLION_CHECK(q.row >= 0 && q.len >= 0 && q.row + q.len <= s.T && k.row >= 0 && k.len >= 0 &&
                     k.row + k.len <= s.T && s.NH % s.KV == 0,
                 std::string(op) + " spans");
}

// Whether some row of some sequence of the query span sees a key of the key span.
bool any_visible(const AttentionShape& s, const AttentionSpan& q, const AttentionSpan& k) {
  if (q.len == 0 || k.len == 0 || k.position > q.position + q.len - 1) return false;
  for (int64_t b = 0; b < s.B; ++b) {
    if (k.position + k.len - 1 >= s.documents.first_key(b, q.position)) return true;
  }
  return false;
}

// Keys [lo, hi) of a tile's row are visible: causal (key <= query) and inside the query's
// document. lo >= hi: none.
struct VisibleRange {
  int64_t lo, hi;
};
VisibleRange visible_range(const AttentionShape& s, int64_t b, int64_t qpos, int64_t kpos0,
                           int64_t cols) {
  const int64_t hi = std::clamp<int64_t>(qpos - kpos0 + 1, 0, cols);
  const int64_t lo = std::clamp<int64_t>(s.documents.first_key(b, qpos) - kpos0, 0, hi);
  return {lo, hi};
}

// Whether the tiles' products go through tile_gemm (fp32 on AVX-512) rather than BLAS.
bool use_tile_gemm(DType dtype) {
  return kTileGemm && dtype == DType::f32;
}

// The row stride of a transposed head [width, len]: len rounded up to 16, and 16 more where
// that is a multiple of 4 KiB (at len 1024 every row of a tile fell into one L1 set).
int64_t transposed_ld(int64_t len) {
  const int64_t ld = (len + 15) / 16 * 16;
  return ld % 1024 == 0 ? ld + 16 : ld;
}

// dst[((b * heads + g) * width + d) * ldt + t] = src[(b * T + row0 + t) * ld + g * width + d],
// ldt = transposed_ld(T): each (sequence, head)'s [len, width] columns as a row-major
// [width, len] matrix, so that the tiles' products with K^T and V^T are plain row-major products.
template <typename T>
void transpose_heads(const T* src, int64_t ld, int64_t B, int64_t T_, int64_t row0, int64_t len,
                     int64_t heads, int64_t width, T* dst, int nthreads) {
  const int64_t ldt = transposed_ld(T_);
#pragma omp parallel for collapse(2) num_threads(nthreads)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t g = 0; g < heads; ++g) {
      const T* in = src + (b * T_ + row0) * ld + g * width;
      T* out = dst + (b * heads + g) * width * ldt;
      int64_t t0 = 0;
#if defined(__AVX512F__)
      if constexpr (std::is_same_v<T, float>) {
        // 16 rows' element d in one gather (the masked form: GCC 12 warns that the plain one's
        // pass-through register is uninitialised).
        const __m512i rows16 = _mm512_mullo_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
            _mm512_set1_epi32(static_cast<int>(ld)));
        for (; t0 + 16 <= len; t0 += 16) {
          for (int64_t d = 0; d < width; ++d) {
            _mm512_storeu_ps(out + d * ldt + t0,
                             _mm512_mask_i32gather_ps(_mm512_setzero_ps(), 0xFFFF, rows16,
                                                      in + t0 * ld + d, sizeof(float)));
          }
        }
      }
#endif
      for (; t0 < len; t0 += 16) {
        const int64_t t1 = std::min(len, t0 + 16);
        for (int64_t d = 0; d < width; ++d) {
          for (int64_t t = t0; t < t1; ++t) out[d * ldt + t] = in[t * ld + d];
        }
      }
    }
  }
}

// dst[((b * heads + g) * T + t) * width + d] = src[(b * T + row0 + t) * ld + g * width + d]:
// each (sequence, head)'s [len, width] columns as a contiguous [len, width] matrix: the forward's
// P V reads V, and the backward's dQ += dS K reads K, without the qkv buffer's long row stride.
// The pass is O(T) against the tiles' O(T^2): from kPackFrom rows on it pays (T = 1024: forward
// -10%, backward -5%), at T = 256 it cost 4-8% of the forward.
constexpr int64_t kPackFrom = 512;
template <typename T>
void pack_heads(const T* src, int64_t ld, int64_t B, int64_t T_, int64_t row0, int64_t len,
                int64_t heads, int64_t width, T* dst, int nthreads) {
#pragma omp parallel for collapse(2) num_threads(nthreads)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t g = 0; g < heads; ++g) {
      const T* in = src + (b * T_ + row0) * ld + g * width;
      T* out = dst + (b * heads + g) * T_ * width;
      for (int64_t t = 0; t < len; ++t) std::copy_n(in + t * ld, width, out + t * width);
    }
  }
}

// max(init, x[0], ..., x[n-1]). A plain max loop is one dependent chain of scalar maxes, which
// GCC does not vectorise (NaN semantics; the forward's hottest line when it was one); 16
// independent running maxima vectorise and give the same maximum.
template <typename T>
T row_max(const T* x, int64_t n, T init) {
  T lanes[16];
  for (T& v : lanes) v = init;
  int64_t c = 0;
  for (; c + 16 <= n; c += 16) {
    for (int j = 0; j < 16; ++j) lanes[j] = std::max(lanes[j], x[c + j]);
  }
  T mx = init;
  for (const T v : lanes) mx = std::max(mx, v);
  for (; c < n; ++c) mx = std::max(mx, x[c]);
  return mx;
}

// C = alpha op(A) B (+ C when accumulate) for row-major B: tile_gemm where `fast`, else BLAS.
template <typename T>
void tile_product(bool fast, bool ta, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                  int64_t lda, const T* B, int64_t ldb, bool accumulate, T* C, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    if (fast) return tile_gemm(ta, M, N, K, alpha, A, lda, B, ldb, C, ldc, accumulate);
  }
  blas_gemm<T>(ta, false, M, N, K, alpha, A, lda, B, ldb, accumulate ? T(1) : T(0), C, ldc);
}
}  // namespace

void CpuBackend::flash_attention_block_forward(Tensor out, Tensor lse, const Tensor& q,
                                               const Tensor& kv, const AttentionShape& s,
                                               AttentionSpan qs, AttentionSpan ks,
                                               AttentionBlocks requested) {
  check_same_dtype(out, q, "flash_attention_block_forward");
  check_same_dtype(kv, q, "flash_attention_block_forward");
  check_same_dtype(lse, q, "flash_attention_block_forward");
  const Matrix mq = as_matrix(q), mk = as_matrix(kv), mo = as_matrix(out);
  TRILLION_CHECK(mq.rows == s.B * s.T && mq.cols >= s.NH * s.HD && mk.rows == s.B * s.T &&
                     mk.cols == s.kv_width() && mo.cols == s.out_width() &&
                     lse.numel() == s.B * s.NH * s.T,
                 "flash_attention_block_forward shapes");
  check_spans(s, qs, ks, "flash_attention_block_forward");
  // Nothing visible: every key after every query, or before every query's document.
  if (!any_visible(s, qs, ks)) return;
  const int64_t VD = s.v_dim();
  const AttentionBlocks bl = choose_attention_blocks(std::max(s.HD, VD), std::max(qs.len, ks.len),
                                                     dtype_size(q.dtype()), requested);
  const int64_t Br = bl.q, Bc = bl.kv, nq = (qs.len + Br - 1) / Br;
  const int nthreads = threads();
  const int64_t per_thread = Br * Bc + Br * VD + 2 * Br;
  const bool fast = use_tile_gemm(q.dtype());
  // K^T and V of every kv head, packed. Sized by the buffer's T rows, not the span's, so the
  // scratch of a ring attention block is that of a one-process run of the same local length
  // (tests assert it).
  const int64_t kt_size = fast ? s.B * s.KV * s.HD * transposed_ld(s.T) : 0;
  const bool pack = fast && s.T >= kPackFrom;
  const int64_t v_size = pack ? s.B * s.KV * VD * s.T : 0;
  Tensor work = scratch(q.dtype(), nthreads * per_thread + kt_size + v_size);
  dispatch(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pq = q.data<T>();
    const T* pk = kv.data<T>();
    T* po = out.data<T>();
    T* pl = lse.data<T>();
    T* pw = work.data<T>();
    T* pkt = pw + nthreads * per_thread;
    T* pv = pkt + kt_size;
    const int64_t ldt = transposed_ld(s.T);
    if (fast) {
      transpose_heads(pk, mk.ld, s.B, s.T, ks.row, ks.len, s.KV, s.HD, pkt, nthreads);
      if (pack)
        pack_heads(pk + s.KV * s.HD, mk.ld, s.B, s.T, ks.row, ks.len, s.KV, VD, pv, nthreads);
    }
    const int64_t group = s.NH / s.KV;
    const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(s.HD)));
    const T neg_inf = -std::numeric_limits<T>::infinity();
    int64_t computed = 0, skipped = 0;  // score elements of computed and document-skipped tiles
#pragma omp parallel for collapse(3) schedule(dynamic) num_threads(nthreads) \
    reduction(+ : computed, skipped)
    for (int64_t b = 0; b < s.B; ++b) {
      for (int64_t h = 0; h < s.NH; ++h) {
        for (int64_t qb = 0; qb < nq; ++qb) {
          T* S = pw + omp_get_thread_num() * per_thread;  // [Br, Bc]
          T* acc = S + Br * Bc;                           // [Br, VD]
          T* m = acc + Br * VD;                           // [Br]
          T* l = m + Br;                                  // [Br]
          const int64_t q0 = qb * Br, rows = std::min(Br, qs.len - q0);
          const int64_t qpos0 = qs.position + q0;  // global position of the tile's first query
          const T* qp = pq + (b * s.T + qs.row + q0) * mq.ld + h * s.HD;
          const T* kbase = pk + (b * s.T + ks.row) * mk.ld + (h / group) * s.HD;
          const T* vbase = pk + (b * s.T + ks.row) * mk.ld + s.KV * s.HD + (h / group) * VD;
          const T* ktbase = pkt + (b * s.KV + h / group) * s.HD * ldt;  // [HD, ks.len], ld ldt
          const T* vpacked = pv + (b * s.KV + h / group) * s.T * VD;    // [ks.len, VD]
          for (int64_t r = 0; r < rows; ++r) m[r] = neg_inf, l[r] = 0;
          for (int64_t i = 0; i < rows * VD; ++i) acc[i] = 0;
          // Key tiles holding a key at or before the tile's last query position.
          const int64_t first_key = s.documents.first_key(b, qpos0);
          for (int64_t k0 = 0; k0 < ks.len && ks.position + k0 <= qpos0 + rows - 1; k0 += Bc) {
            const int64_t cols = std::min(Bc, ks.len - k0);
            const int64_t kpos0 = ks.position + k0;
            if (kpos0 + cols - 1 < first_key) {  // wholly before the tile's documents
              skipped += rows * cols;
              continue;
            }
            computed += rows * cols;
            if (fast) {
              tile_product<T>(true, false, rows, cols, s.HD, scale, qp, mq.ld, ktbase + k0, ldt,
                              false, S, Bc);
            } else {
              blas_gemm<T>(false, true, rows, cols, s.HD, scale, qp, mq.ld, kbase + k0 * mk.ld,
                           mk.ld, T(0), S, Bc);
            }
            for (int64_t r = 0; r < rows; ++r) {
              T* sr = S + r * Bc;
              const auto [lo, hi] = visible_range(s, b, qpos0 + r, kpos0, cols);
              for (int64_t c = 0; c < lo; ++c) sr[c] = 0;
              for (int64_t c = hi; c < cols; ++c) sr[c] = 0;
              if (lo >= hi) continue;  // this row sees no key of the tile (all zeroed)
              const T mx = row_max(sr + lo, hi - lo, m[r]);
              const T correction = exp_any<T>(m[r] - mx);
              T sum = 0;
#pragma omp simd reduction(+ : sum)
              for (int64_t c = lo; c < hi; ++c) sum += sr[c] = exp_any<T>(sr[c] - mx);
              l[r] = l[r] * correction + sum;
              m[r] = mx;
              T* ar = acc + r * VD;
              for (int64_t d = 0; d < VD; ++d) ar[d] *= correction;
            }
            if (pack) {
              tile_product<T>(true, false, rows, VD, cols, T(1), S, Bc, vpacked + k0 * VD, VD, true,
                              acc, VD);
            } else {
              tile_product<T>(fast, false, rows, VD, cols, T(1), S, Bc, vbase + k0 * mk.ld, mk.ld,
                              true, acc, VD);
            }
          }
          for (int64_t r = 0; r < rows; ++r) {
            if (l[r] == T(0)) continue;  // no visible key in the block: (out, lse) unchanged
            T* o = po + (b * s.T + qs.row + q0 + r) * mo.ld + h * VD;
            T& row_lse = pl[(b * s.NH + h) * s.T + qs.row + q0 + r];
            const T block_lse = m[r] + std::log(l[r]);
            const T inv = T(1) / l[r];
            if (row_lse == neg_inf) {
              for (int64_t d = 0; d < VD; ++d) o[d] = acc[r * VD + d] * inv;
              row_lse = block_lse;
              continue;
            }
            const T top = std::max(row_lse, block_lse);
            const T merged = top + std::log(std::exp(row_lse - top) + std::exp(block_lse - top));
            const T w_old = std::exp(row_lse - merged), w_new = std::exp(block_lse - merged) * inv;
            for (int64_t d = 0; d < VD; ++d) o[d] = o[d] * w_old + acc[r * VD + d] * w_new;
            row_lse = merged;
          }
        }
      }
    }
    // 2 (HD + VD) per score element: Q K^T over HD, P V over VD.
    const double per_score = 2.0 * static_cast<double>(s.HD + VD);
    tiles_.computed_flops += per_score * static_cast<double>(computed);
    tiles_.skipped_flops += per_score * static_cast<double>(skipped);
  });
}

void CpuBackend::flash_attention_block_backward(Tensor dq, Tensor dkv, const Tensor& dout,
                                                const Tensor& out, const Tensor& q,
                                                const Tensor& kv, const Tensor& lse,
                                                const AttentionShape& s, AttentionSpan qs,
                                                AttentionSpan ks, AttentionBlocks requested) {
  check_same_dtype(dq, q, "flash_attention_block_backward");
  check_same_dtype(dkv, q, "flash_attention_block_backward");
  check_same_dtype(dout, q, "flash_attention_block_backward");
  const Matrix mq = as_matrix(q), mk = as_matrix(kv), mdq = as_matrix(dq), mdk = as_matrix(dkv),
               mg = as_matrix(dout), mo = as_matrix(out);
  TRILLION_CHECK(mq.rows == s.B * s.T && mq.cols >= s.NH * s.HD && mk.rows == s.B * s.T &&
                     mk.cols == s.kv_width() && mdq.rows == mq.rows && mdq.cols >= s.NH * s.HD &&
                     mdk.rows == mk.rows && mdk.cols == mk.cols && mg.cols == s.out_width() &&
                     mo.cols == s.out_width() && lse.numel() == s.B * s.NH * s.T,
                 "flash_attention_block_backward shapes");
  check_spans(s, qs, ks, "flash_attention_block_backward");
  if (!any_visible(s, qs, ks)) return;
  const int64_t VD = s.v_dim();
  const AttentionBlocks bl = choose_attention_blocks(std::max(s.HD, VD), std::max(qs.len, ks.len),
                                                     dtype_size(q.dtype()), requested);
  const int64_t Br = bl.q, Bc = bl.kv;
  const int nthreads = threads();
  const int64_t per_thread = 2 * Br * Bc + s.T;  // D is qs.len <= T long; T: as kt_size
  const bool fast = use_tile_gemm(q.dtype());
  // K^T and V^T of every kv head, for the products with K^T (scores) and V^T (dP); sized by T
  // as in the forward.
  const int64_t kt_size = fast ? s.B * s.KV * s.HD * transposed_ld(s.T) : 0;
  const int64_t vt_size = fast ? s.B * s.KV * VD * transposed_ld(s.T) : 0;
  const bool pack = fast && s.T >= kPackFrom;
  const int64_t k_size = pack ? s.B * s.KV * s.HD * s.T : 0;  // K packed, for dQ += dS K
  Tensor work = scratch(q.dtype(), nthreads * per_thread + kt_size + vt_size + k_size);
  dispatch(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pq = q.data<T>();
    const T* pk = kv.data<T>();
    const T* pg = dout.data<T>();
    const T* po = out.data<T>();
    const T* pl = lse.data<T>();
    T* pdq = dq.data<T>();
    T* pdk = dkv.data<T>();
    T* pw = work.data<T>();
    T* pkt = pw + nthreads * per_thread;
    T* pvt = pkt + kt_size;
    T* pkp = pvt + vt_size;
    const int64_t ldt = transposed_ld(s.T);
    if (fast) {
      transpose_heads(pk, mk.ld, s.B, s.T, ks.row, ks.len, s.KV, s.HD, pkt, nthreads);
      transpose_heads(pk + s.KV * s.HD, mk.ld, s.B, s.T, ks.row, ks.len, s.KV, VD, pvt, nthreads);
      if (pack) pack_heads(pk, mk.ld, s.B, s.T, ks.row, ks.len, s.KV, s.HD, pkp, nthreads);
    }
    const int64_t group = s.NH / s.KV;
    const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(s.HD)));
#pragma omp parallel for collapse(2) schedule(dynamic) num_threads(nthreads)
    for (int64_t b = 0; b < s.B; ++b) {
      for (int64_t g = 0; g < s.KV; ++g) {
        T* P = pw + omp_get_thread_num() * per_thread;  // [Br, Bc]
        T* dP = P + Br * Bc;                            // [Br, Bc]
        T* D = dP + Br * Bc;                            // [qs.len]
        const T* k = pk + (b * s.T + ks.row) * mk.ld + g * s.HD;
        const T* v = pk + (b * s.T + ks.row) * mk.ld + s.KV * s.HD + g * VD;
        T* dk = pdk + (b * s.T + ks.row) * mdk.ld + g * s.HD;
        T* dv = pdk + (b * s.T + ks.row) * mdk.ld + s.KV * s.HD + g * VD;
        const T* kt = pkt + (b * s.KV + g) * s.HD * ldt;       // [HD, ks.len], ld ldt
        const T* vt = pvt + (b * s.KV + g) * VD * ldt;         // [VD, ks.len], ld ldt
        const T* kpacked = pkp + (b * s.KV + g) * s.T * s.HD;  // [ks.len, HD]
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          const int64_t qrow0 = b * s.T + qs.row;
          const T* qh = pq + qrow0 * mq.ld + h * s.HD;
          const T* d_o = pg + qrow0 * mg.ld + h * VD;
          const T* o = po + qrow0 * mo.ld + h * VD;
          const T* lrow = pl + (b * s.NH + h) * s.T + qs.row;
          T* dqh = pdq + qrow0 * mdq.ld + h * s.HD;
          for (int64_t t = 0; t < qs.len; ++t) {
            T acc = 0;
            for (int64_t d = 0; d < VD; ++d) acc += d_o[t * mg.ld + d] * o[t * mo.ld + d];
            D[t] = acc;
          }
          for (int64_t q0 = 0; q0 < qs.len; q0 += Br) {
            const int64_t rows = std::min(Br, qs.len - q0);
            const int64_t qpos0 = qs.position + q0;
            const int64_t first_key = s.documents.first_key(b, qpos0);
            for (int64_t k0 = 0; k0 < ks.len && ks.position + k0 <= qpos0 + rows - 1; k0 += Bc) {
              const int64_t cols = std::min(Bc, ks.len - k0);
              const int64_t kpos0 = ks.position + k0;
              if (kpos0 + cols - 1 < first_key) continue;  // wholly before the documents
              if (fast) {
                tile_product<T>(true, false, rows, cols, s.HD, scale, qh + q0 * mq.ld, mq.ld,
                                kt + k0, ldt, false, P, Bc);
              } else {
                blas_gemm<T>(false, true, rows, cols, s.HD, scale, qh + q0 * mq.ld, mq.ld,
                             k + k0 * mk.ld, mk.ld, T(0), P, Bc);
              }
              for (int64_t r = 0; r < rows; ++r) {
                const auto [lo, hi] = visible_range(s, b, qpos0 + r, kpos0, cols);
                T* pr = P + r * Bc;
                const T l = lrow[q0 + r];
                for (int64_t c = 0; c < lo; ++c) pr[c] = 0;
#pragma omp simd
                for (int64_t c = lo; c < hi; ++c) pr[c] = exp_any<T>(pr[c] - l);
                for (int64_t c = hi; c < cols; ++c) pr[c] = 0;
              }
              // dV_j += P^T dO_i ; dP = dO_i V_j^T
              tile_product<T>(fast, true, cols, VD, rows, T(1), P, Bc, d_o + q0 * mg.ld, mg.ld,
                              true, dv + k0 * mdk.ld, mdk.ld);
              if (fast) {
                tile_product<T>(true, false, rows, cols, VD, T(1), d_o + q0 * mg.ld, mg.ld, vt + k0,
                                ldt, false, dP, Bc);
              } else {
                blas_gemm<T>(false, true, rows, cols, VD, T(1), d_o + q0 * mg.ld, mg.ld,
                             v + k0 * mk.ld, mk.ld, T(0), dP, Bc);
              }
              for (int64_t r = 0; r < rows; ++r) {
                for (int64_t c = 0; c < cols; ++c) {
                  dP[r * Bc + c] = P[r * Bc + c] * (dP[r * Bc + c] - D[q0 + r]);
                }
              }
              // dQ_i += scale dS K_j ; dK_j += scale dS^T Q_i
              if (pack) {
                tile_product<T>(true, false, rows, s.HD, cols, scale, dP, Bc, kpacked + k0 * s.HD,
                                s.HD, true, dqh + q0 * mdq.ld, mdq.ld);
              } else {
                tile_product<T>(fast, false, rows, s.HD, cols, scale, dP, Bc, k + k0 * mk.ld, mk.ld,
                                true, dqh + q0 * mdq.ld, mdq.ld);
              }
              tile_product<T>(fast, true, cols, s.HD, rows, scale, dP, Bc, qh + q0 * mq.ld, mq.ld,
                              true, dk + k0 * mdk.ld, mdk.ld);
            }
          }
        }
      }
    }
  });
}

}  // namespace trillion::cpu
