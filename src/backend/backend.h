// Backend: the operations the model needs, over Tensor views, for one device kind. The model
// calls only these, so the CPU reference (backend/cpu) and the CUDA backend are interchangeable
// and can be tested op against op. Conventions for every op:
//   - outputs first, inputs next, sizes last; row-major 2-D views ([rows, cols], row stride may
//     exceed cols); all tensors of one call share a dtype (f32, or f64 for gradient checks);
//   - activation gradients are written (=), parameter gradients accumulate (+=); ops that write
//     the residual-stream gradient accumulate into it (+=), and say so.
// Dimension letters: N rows (= B*T tokens), C model width, F ffn width, V vocab, NH heads,
// KV kv heads, HD query/key head dim, VD value head dim (= HD except under MLA),
// QKV = (NH + KV) * HD + KV * VD.
#pragma once

#include <cstdint>
#include <memory>

#include "backend/backend_ops.h"
#include "core/memory.h"
#include "core/tensor.h"

namespace trillion {

// Document masking inside packed sequences (data.document_mask): start[b * stride + p] is the
// global position where the document holding global position p of sequence b begins (stride =
// the whole sequence's length, whatever rows this rank holds). Key k is visible to query q iff
// start[q] <= k <= q: attention is causal and block-diagonal. start == nullptr: plain causal.
// rope[n] (optional, one per row of this rank's [B*T] rows) is the RoPE table row of row n
// (data.restart_positions: p - start[p]); nullptr: the row's own position.
struct DocumentMask {
  const int32_t* start = nullptr;
  int64_t stride = 0;
  const int32_t* rope = nullptr;
  bool on() const { return start != nullptr; }
  // First visible key position of the query at global position p of sequence b.
  int64_t first_key(int64_t b, int64_t p) const { return on() ? start[b * stride + p] : 0; }
};

// A target the loss ignores (a prediction across a document boundary, or padding): its loss is 0
// and its logits' gradient is 0. The cross-entropy ops accept it in place of a vocabulary id.
constexpr int32_t kIgnoredTarget = -1;

// The attention core's sizes. HD is the query/key head dim (the scores' dot products, the softmax
// scale 1/sqrt(HD)); VD the value head dim, which multi-head latent attention (DeepSeek-V2/V3)
// sets apart from HD (qk 192 = nope 128 + rope 64, v 128). A qkv row is Q [NH*HD] | K [KV*HD] |
// V [KV*VD]; the output row is [NH*VD].
struct AttentionShape {
  int64_t B = 0, T = 0, NH = 0, KV = 0, HD = 0;
  int64_t VD = 0;            // value head dim; 0 = HD
  DocumentMask documents{};  // none by default: causal attention
  int64_t v_dim() const { return VD > 0 ? VD : HD; }
  int64_t qkv_width() const { return (NH + KV) * HD + KV * v_dim(); }
  int64_t kv_width() const { return KV * (HD + v_dim()); }  // K | V columns: [KV*HD | KV*VD]
  int64_t out_width() const { return NH * v_dim(); }        // the heads' output [NH*VD]
};

// Tile sizes of the tiled (FlashAttention) kernels; 0 = chosen from the cache size.
struct AttentionBlocks {
  int64_t q = 0, kv = 0;
};

// A run of consecutive positions of every sequence in an attention buffer: rows [row, row + len)
// of each sequence's T rows hold global positions [position, position + len). Context
// parallelism holds a sequence as such runs (zigzag: two per rank); the causal mask compares
// global positions, so the same block kernel serves any split (and any future sliding-window or
// document mask that needs query and key offsets).
struct AttentionSpan {
  int64_t row = 0, len = 0, position = 0;
};

struct AdamWParams {
  double lr = 0, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0;
  int64_t step = 1;  // 1-based, for bias correction
};

// Op contracts (the signatures are in backend_ops.h):
//   gemm          C = alpha * op(A) op(B) + beta * C, op(X) = X or X^T. C [M, N]; op(A) [M, K];
//                 op(B) [K, N]. beta = 1 accumulates (weight gradients, residual adds).
//   gemm_batched  the same for a batch: A, B, C are 3-D [batch, rows, cols] views.
//   embedding_forward          out[N, C] = table[tokens[n]]; tokens must be < V (checked).
//   embedding_backward_weight  dtable[V, C] += scatter of dout[N, C] by tokens.
//   vocab_embedding_forward    the vocabulary-parallel lookup: rows[V_r, C] holds vocabulary rows
//                              [first, first + V_r); out[n] = rows[tokens[n] - first] for the
//                              tokens in that range, 0 for the others (tokens must be >= 0).
//   vocab_embedding_backward_weight  drows[V_r, C] += scatter of dout[N, C] by the tokens in
//                              [first, first + V_r); the others are skipped.
//   rmsnorm_forward            out[N, C] = x * rstd * w, rstd[N] = 1 / sqrt(mean(x^2) + eps).
//   rmsnorm_backward_input     dx[N, C] += d(out)/dx . dout (accumulates: x is the residual
//                              stream).
//   rmsnorm_backward_weight    dw[C] += sum_n dout * x * rstd.
//   rope_forward   in place on the query and key heads of qkv[N, QKV] (rows are (b, t),
//                  position t): rotates the pairs (i, i + HD/2) by angle t * theta^(-2i/HD)
//                  ("rotate half" convention). cos_sin is [T, HD] holding cos in the first HD/2
//                  columns and sin in the last HD/2. With s.documents.rope, row n uses table
//                  row rope[n] instead (cos_sin then covers every row rope names). V (the last
//                  KV*VD columns) is untouched.
//   rope_backward  the transpose rotation, in place on dqkv.
//   Every attention op below honours s.documents (DocumentMask): a key outside the query's
//   document is masked like a future key; the tiled kernels skip key tiles wholly before the
//   document of the tile's first query, exactly as they skip tiles above the diagonal.
//   Every attention op below takes qkv rows Q [NH*HD] | K [KV*HD] | V [KV*VD] and writes or
//   reads output rows [NH*VD]; scores are Q K^T over HD, scaled by 1/sqrt(HD) whatever VD is.
//   attention_forward    causal grouped-query attention, materialised: probs[B, NH, T, T] (saved
//                        for backward), out[N, NH*VD] from qkv[N, QKV]. Scale 1/sqrt(HD).
//   attention_backward   dqkv[N, QKV] = gradient of the attention core (written).
//   flash_attention_forward   causal grouped-query attention, tiled (FlashAttention-2, Dao
//                        2307.08691): query blocks x key/value blocks with an online softmax
//                        (running max and sum); only lse[B, NH, T] (the log-sum-exp of each score
//                        row) is kept for backward, never the T x T matrix. Blocks above the
//                        diagonal are skipped. Same result as attention_forward up to rounding.
//   flash_attention_backward  dqkv[N, QKV] (written) from dout[N, NH*VD] and the forward's out
//                        and lse; probabilities are recomputed block by block.
//   flash_attention_block_forward  one (query span, key span) block of causal attention, merged
//                        into (out[B*T, NH*VD], lse): queries are the first NH*HD columns of
//                        q[B*T, >= NH*HD] (a qkv buffer), keys and values
//                        kv[B*T, KV*HD + KV*VD] = K | V; key position
//                        <= query position is visible. For each query row of the span with a
//                        visible key, (out, lse) := the exact merge of the old (out, lse) with
//                        this block's (softmax-weighted output, log-sum-exp):
//                        lse' = log(e^lse + e^lse_b), out' = e^(lse - lse') out +
//                        e^(lse_b - lse') out_b. Start from out = 0, lse = -inf; rows with no
//                        visible key are left as they are; key tiles wholly above the diagonal
//                        are skipped.
//   flash_attention_block_backward  the same block's gradient from the merged (final) out and
//                        lse: dq[B*T, >= NH*HD] (first NH*HD columns) += for the query span's
//                        rows, dkv[B*T, KV*HD + KV*VD] += for the key span's rows (both
//                        accumulate, so the blocks of a ring add up).
//   swiglu_forward   out[N, F] = silu(gate) * up, gate_up[N, 2F] = [gate | up].
//   swiglu_backward  dgate_up[N, 2F] from dout[N, F] (written).
//   cross_entropy_forward   row-wise log-sum-exp and loss of logits[n, V]: lse[n], losses[n] =
//                           lse - logit[target].
//   cross_entropy_backward  in place: logits[n, V] := scale * (softmax(logits) - onehot(target)),
//                           using lse from forward.
//   vocab_cross_entropy_forward   per row of a vocabulary shard logits[n, V_r] (columns = vocabulary
//                           ids [first, first + V_r)): stats[n, 3] (f64) = the row's max m, sum of
//                           exp(logit - m), and logit[target - first] if the target is in the
//                           shard, else 0 (Megatron's vocab-parallel cross-entropy; the tensor
//                           group reduces them).
//   vocab_cross_entropy_backward  in place on a shard: logits := scale * (exp(logits - lse) -
//                           onehot(target - first)), the onehot only where the target is in it;
//                           lse[n] is the global log-sum-exp.
//   adamw_update  AdamW with decoupled weight decay (Loshchilov & Hutter 1711.05101), one tensor.
//   fill, copy (converts dtype if they differ), add (y += x), scale (x *= alpha),
//   sum_squares (in double, deterministic).
// What the tiled attention kernels' forward passes computed since the backend was made:
// 2 (HD + VD) FLOPs per score element (Q K^T over HD, P V over VD) of every computed tile, and of
// every tile skipped because it lies wholly before its queries' documents (tiles above the diagonal
// are not counted).
struct AttentionTileFlops {
  double computed_flops = 0, skipped_flops = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual int threads() const = 0;
  virtual AttentionTileFlops attention_tile_flops() const { return {}; }
  // Work a caller did outside the backend's ops (the bf16 recipe's oneDNN GEMMs and operand
  // roundings, model/linear_gemm.cpp), reported so a profiler can show it under `group`; the
  // strings are literals. Backends that do not profile ignore it.
  virtual void record_external(const char* group, double seconds, double flops, double bytes) {}

#define TRILLION_BACKEND_DECLARE_PURE(ret, name, group, params, args) virtual ret name params = 0;
  TRILLION_BACKEND_OPS(TRILLION_BACKEND_DECLARE_PURE)
#undef TRILLION_BACKEND_DECLARE_PURE
};

// The CPU reference backend (OpenBLAS + OpenMP). Scratch memory it needs (attention's
// per-thread score gradients) is accounted to `tracker` as workspace.
std::unique_ptr<Backend> make_cpu_backend(MemoryTracker& tracker);

}  // namespace trillion
