// Backend: the operations the model needs, over Tensor views, for one device kind. The model
// calls only these, so the CPU reference (backend/cpu) and the CUDA backend are interchangeable
// and can be tested op against op. Conventions for every op:
//   - outputs first, inputs next, sizes last; row-major 2-D views ([rows, cols], row stride may
//     exceed cols); all tensors of one call share a dtype (f32, or f64 for gradient checks);
//   - activation gradients are written (=), parameter gradients accumulate (+=); ops that write
//     the residual-stream gradient accumulate into it (+=), and say so.
// Dimension letters: N rows (= B*T tokens), C model width, F ffn width, V vocab, NH heads,
// KV kv heads, HD head dim, QKV = (NH + 2*KV) * HD.
#pragma once

#include <cstdint>
#include <memory>

#include "core/memory.h"
#include "core/tensor.h"

namespace trillion {

struct AttentionShape {
  int64_t B = 0, T = 0, NH = 0, KV = 0, HD = 0;
  int64_t qkv_width() const { return (NH + 2 * KV) * HD; }
};

// Tile sizes of the tiled (FlashAttention) kernels; 0 = chosen from the cache size.
struct AttentionBlocks {
  int64_t q = 0, kv = 0;
};

struct AdamWParams {
  double lr = 0, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0;
  int64_t step = 1;  // 1-based, for bias correction
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual int threads() const = 0;

  // C = alpha * op(A) op(B) + beta * C, op(X) = X or X^T. C [M, N]; op(A) [M, K]; op(B) [K, N].
  // beta = 1 accumulates (weight gradients, residual adds).
  virtual void gemm(Tensor C, bool trans_a, bool trans_b, const Tensor& A, const Tensor& B,
                    double alpha, double beta) = 0;
  // The same for a batch: A, B, C are 3-D [batch, rows, cols] views.
  virtual void gemm_batched(Tensor C, bool trans_a, bool trans_b, const Tensor& A, const Tensor& B,
                            double alpha, double beta) = 0;

  // out[N, C] = table[tokens[n]]; tokens must be < V (checked).
  virtual void embedding_forward(Tensor out, const int32_t* tokens, const Tensor& table) = 0;
  // dtable[V, C] += scatter of dout[N, C] by tokens.
  virtual void embedding_backward_weight(Tensor dtable, const int32_t* tokens,
                                         const Tensor& dout) = 0;

  // out[N, C] = x * rstd * w, rstd[N] = 1 / sqrt(mean(x^2) + eps).
  virtual void rmsnorm_forward(Tensor out, Tensor rstd, const Tensor& x, const Tensor& w,
                               double eps) = 0;
  // dx[N, C] += d(out)/dx . dout   (accumulates: x is the residual stream).
  virtual void rmsnorm_backward_input(Tensor dx, const Tensor& dout, const Tensor& x,
                                      const Tensor& w, const Tensor& rstd) = 0;
  // dw[C] += sum_n dout * x * rstd.
  virtual void rmsnorm_backward_weight(Tensor dw, const Tensor& dout, const Tensor& x,
                                       const Tensor& rstd) = 0;

  // In place on the query and key heads of qkv[N, QKV] (rows are (b, t), position t): rotates
  // the pairs (i, i + HD/2) by angle t * theta^(-2i/HD) ("rotate half" convention). cos_sin is
  // [T, HD] holding cos in the first HD/2 columns and sin in the last HD/2.
  virtual void rope_forward(Tensor qkv, const Tensor& cos_sin, const AttentionShape& s) = 0;
  // The transpose rotation, in place on dqkv.
  virtual void rope_backward(Tensor dqkv, const Tensor& cos_sin, const AttentionShape& s) = 0;

  // Causal grouped-query attention, materialised: probs[B, NH, T, T] (saved for backward),
  // out[N, NH*HD] from qkv[N, QKV]. Scale 1/sqrt(HD).
  virtual void attention_forward(Tensor out, Tensor probs, const Tensor& qkv,
                                 const AttentionShape& s) = 0;
  // dqkv[N, QKV] = gradient of the attention core (written, not accumulated).
  virtual void attention_backward(Tensor dqkv, const Tensor& dout, const Tensor& qkv,
                                  const Tensor& probs, const AttentionShape& s) = 0;

  // Causal grouped-query attention, tiled (FlashAttention-2, Dao 2307.08691): query blocks x
  // key/value blocks with an online softmax (running max and sum); only lse[B, NH, T] (the
  // log-sum-exp of each score row) is kept for backward, never the T x T matrix. Blocks above
  // the diagonal are skipped. Same result as attention_forward up to rounding.
  virtual void flash_attention_forward(Tensor out, Tensor lse, const Tensor& qkv,
                                       const AttentionShape& s, AttentionBlocks blocks) = 0;
  // dqkv[N, QKV] (written) from dout and the forward's out and lse; probabilities are
  // recomputed block by block.
  virtual void flash_attention_backward(Tensor dqkv, const Tensor& dout, const Tensor& out,
                                        const Tensor& qkv, const Tensor& lse,
                                        const AttentionShape& s, AttentionBlocks blocks) = 0;

  // out[N, F] = silu(gate) * up, gate_up[N, 2F] = [gate | up].
  virtual void swiglu_forward(Tensor out, const Tensor& gate_up) = 0;
  // dgate_up[N, 2F] from dout[N, F] (written).
  virtual void swiglu_backward(Tensor dgate_up, const Tensor& dout, const Tensor& gate_up) = 0;

  // Row-wise log-sum-exp and loss of logits[n, V]: lse[n], losses[n] = lse - logit[target].
  virtual void cross_entropy_forward(Tensor losses, Tensor lse, const Tensor& logits,
                                     const int32_t* targets) = 0;
  // In place: logits[n, V] := scale * (softmax(logits) - onehot(target)), using lse from forward.
  virtual void cross_entropy_backward(Tensor logits, const Tensor& lse, const int32_t* targets,
                                      double scale) = 0;

  // AdamW with decoupled weight decay (Loshchilov & Hutter 1711.05101) on one tensor.
  virtual void adamw_update(Tensor param, const Tensor& grad, Tensor m, Tensor v,
                            const AdamWParams& p) = 0;

  virtual void fill(Tensor x, double value) = 0;
  virtual void copy(Tensor dst, const Tensor& src) = 0;  // converts dtype if they differ
  virtual void add(Tensor y, const Tensor& x) = 0;       // y += x
  virtual void scale(Tensor x, double alpha) = 0;        // x *= alpha
  virtual double sum_squares(const Tensor& x) = 0;       // in double, deterministic
};

// The CPU reference backend (OpenBLAS + OpenMP). Scratch memory it needs (attention's
// per-thread score gradients) is accounted to `tracker` as workspace.
std::unique_ptr<Backend> make_cpu_backend(MemoryTracker& tracker);

}  // namespace trillion
