// MLA module: multi-head latent attention (DeepSeek-V2 2405.04434 §2.1, DeepSeek-V3 2412.19437
// §2.1.1), the attention sublayer of a block from the normed input x [N, C] to the residual add:
//   q      = Wq · rmsnorm(Wq_a · x)          (Wq = W_UQ;W_QR per head; q_lora_rank 0: Wq · x)
//   c_kv   = Wkv_a[:DC] · x,   k_rope = RoPE(Wkv_a[DC:] · x)     (ONE rope key for all heads)
//   k_nope_h | v_h = Wkv_b[h] · rmsnorm(c_kv)                    (per head)
//   q_h = [q_nope_h ; RoPE(q_rope_h)],  k_h = [k_nope_h ; k_rope],  scale 1/sqrt(DN + DR)
//   out += Wo · attention(q, k, v)
// The keys and values are assembled into the qkv buffer the backend's attention cores take
// (Q [N, NH*HD] | K [N, NH*HD] | V [N, NH*VD], HD = DN + DR, one K/V head per query head), so
// the tiled and the materialised cores serve both modules; the core's tensors are the block's
// AttentionActivations (carved by Attention::carve: LocalShape's widths include VD). Weight rows
// are per head ([nope | rope] for Wq, [k_nope | v] for Wkv_b), so tensor parallelism shards them
// by heads like GQA's wq/wk/wv: Wq (or Wq_b), Wkv_b column-parallel, Wo row-parallel, and the
// down-projections Wq_a, Wkv_a with their norms replicated; their gradients come from this
// rank's heads only and are summed over tp (reduce_replicated_gradients in block.h).
// Under context parallelism the ring carries either the per-head K and V (as for GQA) or, with
// a latent ring attached (ContextAttention::latent_width() > 0, parallel.cp_mla), the latent
// rmsnorm(c_kv) | k_rope: each rank up-projects the blocks it receives with its own (tp-local)
// Wkv_b and maps their dK/dV back onto the latent (the gradient that travels home), and the
// Wkv_b wgrad of every block it computed is kept in MlaStash::d_wkv_b by backward_input and
// added by backward_weight (Wkv_b's gradient is then reduced over dp x cp like every weight's).
// Letters: DQ q_lora_rank, DC kv_lora_rank, DN qk_nope_head_dim, DR qk_rope_head_dim, VD
// v_head_dim; the rest as in model/glossary.h, whose accumulation rule holds here too.
#pragma once

#include "model/attention.h"
#include "model/config.h"

namespace trillion {

struct MlaWeights {    // parameters or their gradients (same layout)
  Tensor wq_a;         // [DQ, C] (empty when q_lora_rank = 0)
  Tensor q_norm;       // [DQ]
  Tensor wq;           // [NH*HD, DQ] (wq_b), or [NH*HD, C] without query compression
  Tensor wkv_a;        // [DC + DR, C]: the kv latent's rows, then the rope key's
  Tensor kv_norm;      // [DC]
  Tensor wkv_b;        // [NH*(DN + VD), DC]: per head its k_nope rows, then its v rows
  Tensor wo;           // [C, NH*VD]
  int64_t layer = -1;  // the global block (as AttentionWeights::layer)
};

struct MlaActivations {  // the latents forward keeps for backward (the core is the block's attn)
  Tensor cq;             // [N, DQ] query latent before its norm (q_lora_rank > 0)
  Tensor rstd_q;         // [N]
  Tensor cq_norm;        // [N, DQ] wq_b's input
  Tensor ckv;            // [N, DC] kv latent before its norm
  Tensor rstd_kv;        // [N]
  Tensor ckv_norm;       // [N, DC] wkv_b's input
  Tensor k_rope;         // [N, DR] the rotated shared key (norm-up recompute only)
};

struct MlaStash {     // kept from backward_input for backward_weight (with the core's d_qkv)
  Tensor d_ckv;       // [N, DC] feeds wkv_a's latent rows
  Tensor d_ckv_norm;  // [N, DC] feeds kv_norm
  Tensor d_k_rope;    // [N, DR] feeds wkv_a's rope rows
  Tensor d_cq;        // [N, DQ] feeds wq_a
  Tensor d_cq_norm;   // [N, DQ] feeds q_norm
  Tensor d_wkv_b;     // latent ring: [NH*(DN + VD), DC] Wkv_b's wgrad from every ring block
};

class Mla {
 public:
  Mla(Backend& backend, const ParallelContext& ctx, const MlaConfig& dims, double norm_eps,
      bool tiled, AttentionBlocks blocks)
      : be_(backend), ctx_(ctx), d_(dims), eps_(norm_eps), tiled_(tiled), blocks_(blocks) {}

  // The latents from `kept`; their normed copies from `normed` (norm-up: the shared recompute
  // buffer), and with norm_up the rotated shared key from `kept`.
  MlaActivations carve(Carver& kept, Carver& normed, bool norm_up = false) const;
  MlaStash carve_stash(Carver& c) const;

  // out[N, C] += Wo · mla(x); x [N, C] is the normed input. core: the block's attention core
  // tensors (qkv written here, then state and heads).
  void forward(Tensor out, const Tensor& x, const MlaWeights& w, const MlaActivations& a,
               const AttentionActivations& core, const Tensor& cos_sin);
  // Recomputes the core's state and heads from qkv (and, under the latent ring, the latent and
  // Wkv_b; bitwise what forward wrote).
  void recompute_core(const AttentionActivations& core, const MlaWeights& w,
                      const MlaActivations& a);
  // norm-up (DeepSeek-V3 §3.2.3): recomputes the normed latents and the up-projected qkv from x
  // (the recomputed norm1), the kept pre-norm latents and the kept rotated key k_rope (bitwise
  // what forward wrote).
  void recompute_up(const Tensor& x, const MlaWeights& w, const MlaActivations& a,
                    const AttentionActivations& core, const Tensor& cos_sin);
  // dx[N, C] = dL/dx from dout[N, C]; fills d_qkv (the core's stash) and `stash`.
  void backward_input(Tensor dx, const Tensor& dout, const MlaWeights& w, const MlaActivations& a,
                      const AttentionActivations& core, const AttentionStash& d_core,
                      const MlaStash& stash, const Tensor& d_heads, const Tensor& cos_sin);
  // grads += weight gradients from x, the saved activations, dout and the stashes.
  void backward_weight(const MlaWeights& grads, const Tensor& x, const Tensor& dout,
                       const MlaActivations& a, const AttentionActivations& core,
                       const AttentionStash& d_core, const MlaStash& stash);

 private:
  int64_t qk() const { return d_.qk_nope_head_dim + d_.qk_rope_head_dim; }  // HD
  // The latent ring, or nullptr (no cp, or the ring carries per-head K/V).
  ContextAttention* latent_ring() const;
  // The latent ring's up-projection of a latent block and its transpose; `d_wkv_b` takes the
  // wgrad.
  ContextAttention::LatentKeys latent_keys(const MlaWeights& w, const Tensor& d_wkv_b);
  // The RoPE shape of one head of width DR.
  AttentionShape rope_shape(const DocumentMask& documents) const;
  // RoPE (forward) or its transpose on the rope columns of every query head and, with key, on
  // the shared key (key head 0's rope columns).
  void rope(const Tensor& qkv, const Tensor& cos_sin, const DocumentMask& documents, bool forward,
            bool key = true);
  // The normed latents, the queries and the per-head keys and values into qkv, then RoPE on the
  // queries; the shared key's columns of heads 1.. are copied from `k_rope` (rotated).
  void up_project(const Tensor& x, const MlaWeights& w, const MlaActivations& a, const Tensor& qkv,
                  const Tensor& cos_sin, const DocumentMask& documents, const Tensor& k_rope);

  Backend& be_;
  const ParallelContext& ctx_;
  MlaConfig d_;
  double eps_;
  bool tiled_;
  AttentionBlocks blocks_;
};

}  // namespace trillion
