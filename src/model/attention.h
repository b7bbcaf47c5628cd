// Attention module: the attention sublayer of a block, from the normed input to the residual
// add. out += Wo · attention(rope(Wqkv · x)), causal grouped-query attention over this rank's
// heads (LocalShape: NH/tp query heads, KV/tp key/value heads). The core is tiled
// (FlashAttention-2: only the log-sum-exp is kept) or materialised (probabilities kept; the
// reference). Under a document mask (packed sequences) attention and RoPE follow
// AttentionActivations::documents (backend.h DocumentMask). See model/glossary.h for the letters
// and the accumulation rule.
#pragma once

#include <functional>

#include "model/carver.h"
#include "model/parallel_context.h"

namespace trillion {

// The attention core when the sequence is split over context-parallel ranks (implemented by
// parallel/context.h's ring attention): the same contract as the backend's tiled attention on
// this rank's rows — out [N, NH*HD] and lse [B, NH, T_local] from qkv [N, QKV] (after RoPE), and
// dqkv [N, QKV] (written) — but each query attends to the keys of the whole sequence before it.
class ContextAttention {
 public:
  virtual ~ContextAttention() = default;
  // documents: the micro-batch's document mask over the whole sequence (none: causal).
  virtual void forward(Tensor out, Tensor lse, const Tensor& qkv,
                       const DocumentMask& documents) = 0;
  virtual void backward(Tensor dqkv, const Tensor& dout, const Tensor& out, const Tensor& qkv,
                        const Tensor& lse, const DocumentMask& documents) = 0;

  // MLA's latent ring (parallel.cp_mla, plan/context_ring.h): the blocks that travel are the
  // latent [N, DC + DR] (rmsnorm(c_kv) | rotated k_rope) and, backward, its gradient; `up` turns
  // a (remote) latent block into this rank's per-head K | V block [N, KV (HD + VD)] (qkv's
  // column layout), `down` maps that block's dK | dV back onto the latent (written) and adds the
  // block's Wkv_b wgrad (wherever the caller keeps it). Without it (latent_width() == 0) MLA
  // rings its per-head K/V through forward/backward above.
  struct LatentKeys {
    std::function<void(const Tensor& latent, const Tensor& kv)> up;
    std::function<void(const Tensor& dkv, const Tensor& latent, const Tensor& d_latent)> down;
  };
  virtual int64_t latent_width() const { return 0; }
  // As forward; ckv_norm [N, DC] and k_rope [N, DR] are this rank's latent, qkv's K/V its
  // up-projection.
  virtual void forward_latent(Tensor out, Tensor lse, const Tensor& qkv, const Tensor& ckv_norm,
                              const Tensor& k_rope, const LatentKeys& keys,
                              const DocumentMask& documents);
  // As backward, but dqkv gets dQ only (K/V columns zero) and the gradient of this rank's latent
  // (every rank's queries) lands in d_ckv_norm [N, DC] and d_k_rope [N, DR] (rotated space).
  virtual void backward_latent(Tensor dqkv, Tensor d_ckv_norm, Tensor d_k_rope, const Tensor& dout,
                               const Tensor& out, const Tensor& qkv, const Tensor& ckv_norm,
                               const Tensor& k_rope, const Tensor& lse, const LatentKeys& keys,
                               const DocumentMask& documents);
};

struct AttentionWeights {  // parameters or their gradients (same layout)
  Tensor wqkv;             // [QKV, C]: wq | wk | wv stored back to back
  Tensor wo;               // [C, NH*HD]
  // The global block these belong to: its linear GEMMs' precision (model/linear_gemm.h); -1
  // outside a model's blocks (the recipe's format).
  int64_t layer = -1;
};

struct AttentionActivations {  // saved by forward for backward
  Tensor qkv;                  // [N, QKV] after RoPE
  Tensor state;                // tiled: lse [B, NH, T]; materialised: probs [B, NH, T, T]
  Tensor heads;                // [N, NH*HD] attention output before Wo
  // The micro-batch's document mask (data.document_mask; set by the stage for its slot, read by
  // forward, recompute and backward alike). None: causal attention over the whole sequence.
  DocumentMask documents{};
};

struct AttentionStash {  // kept from backward_input for backward_weight
  Tensor d_qkv;          // [N, QKV]
};

class Attention {
 public:
  Attention(Backend& backend, const ParallelContext& ctx, bool tiled, AttentionBlocks blocks)
      : be_(backend), ctx_(ctx), tiled_(tiled), blocks_(blocks) {}

  // Carves the saved tensors: qkv from `kept`, the core (state, heads) from `core` (the shared
  // recompute buffer under selective recompute).
  AttentionActivations carve(Carver& kept, Carver& core) const;
  AttentionStash carve_stash(Carver& c) const;
  Tensor carve_scratch(Carver& c) const;  // d_heads [N, NH*HD]

  // out[N, C] += Wo · attention(rope(Wqkv · x)); x [N, C] is the normed input.
  void forward(Tensor out, const Tensor& x, const AttentionWeights& w,
               const AttentionActivations& a, const Tensor& cos_sin);
  // Recomputes state and heads from qkv (bitwise what forward wrote).
  void recompute_core(const AttentionActivations& a);
  // dx[N, C] = dL/dx from dout[N, C] = dL/d(out); fills the stash.
  void backward_input(Tensor dx, const Tensor& dout, const AttentionWeights& w,
                      const AttentionActivations& a, const AttentionStash& stash,
                      const Tensor& d_heads, const Tensor& cos_sin);
  // grads += weight gradients from x, the saved activations, dout and the stash.
  void backward_weight(const AttentionWeights& grads, const Tensor& x, const Tensor& dout,
                       const AttentionActivations& a, const AttentionStash& stash);

 private:
  Backend& be_;
  const ParallelContext& ctx_;
  bool tiled_;
  AttentionBlocks blocks_;
};

}  // namespace trillion
