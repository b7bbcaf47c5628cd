// Whole-sequence tiled causal grouped-query attention on the CPU (FlashAttention-2, Dao
// 2307.08691): one block of cpu_flash_block.cpp whose query and key spans are the whole sequence
// (row 0, position 0, length T), so forward and backward each have one tiled loop, shared with
// ring attention. Forward starts the block's merge from lse = -inf, so it writes out and lse
// (never reads the old out); backward zeroes dqkv, then the block accumulates dQ | dK | dV into
// it. Same arithmetic, in the same order, as before the kernels were shared: bitwise equal.
// Memory beyond inputs and outputs: lse (B*NH*T) and per-thread tiles plus one T-vector.
// The value head dim VD may differ from the query/key head dim HD (MLA): qkv rows are
// Q [NH*HD] | K [KV*HD] | V [KV*VD], out rows [NH*VD].
#include <unistd.h>

#include <limits>

#include "backend/cpu/cpu_backend.h"

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

namespace {
// The K | V columns of a qkv (or dqkv) buffer [B*T, QKV], [B*T, KV*HD + KV*VD], as the block
// kernels take them.
Tensor kv_columns(const Tensor& qkv, const AttentionShape& s) {
  const Matrix m = as_matrix(qkv);
  const Tensor rows2d = qkv.rank() == 2 ? qkv : qkv.view({m.rows, m.cols});
  return rows2d.columns(s.NH * s.HD, s.qkv_width());
}
}  // namespace

void CpuBackend::flash_attention_forward(Tensor out, Tensor lse, const Tensor& qkv,
                                         const AttentionShape& s, AttentionBlocks requested) {
  check_same_dtype(out, qkv, "flash_attention_forward");
  check_same_dtype(lse, qkv, "flash_attention_forward");
  const Matrix mq = as_matrix(qkv), mo = as_matrix(out);
  TRILLION_CHECK(mq.rows == s.B * s.T && mq.cols == s.qkv_width() && mo.cols == s.out_width() &&
                     lse.numel() == s.B * s.NH * s.T && s.NH % s.KV == 0,
                 "flash_attention_forward shapes");
  const AttentionSpan all{0, s.T, 0};
  CpuBackend::fill(lse, -std::numeric_limits<double>::infinity());
  CpuBackend::flash_attention_block_forward(out, lse, qkv, kv_columns(qkv, s), s, all, all,
                                            requested);
}

void CpuBackend::flash_attention_backward(Tensor dqkv, const Tensor& dout, const Tensor& out,
                                          const Tensor& qkv, const Tensor& lse,
                                          const AttentionShape& s, AttentionBlocks requested) {
  check_same_dtype(dqkv, qkv, "flash_attention_backward");
  check_same_dtype(dout, qkv, "flash_attention_backward");
  const Matrix mq = as_matrix(qkv), md = as_matrix(dqkv), mg = as_matrix(dout), mo = as_matrix(out);
  TRILLION_CHECK(mq.rows == s.B * s.T && mq.cols == s.qkv_width() && md.rows == mq.rows &&
                     md.cols == mq.cols && mg.cols == s.out_width() && mo.cols == s.out_width() &&
                     lse.numel() == s.B * s.NH * s.T && s.NH % s.KV == 0,
                 "flash_attention_backward shapes");
  const AttentionSpan all{0, s.T, 0};
  CpuBackend::fill(dqkv, 0.0);
  CpuBackend::flash_attention_block_backward(dqkv, kv_columns(dqkv, s), dout, out, qkv,
                                             kv_columns(qkv, s), lse, s, all, all, requested);
}

}  // namespace trillion::cpu
