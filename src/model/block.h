// One pre-norm Llama block: x -> mid = x + Wo·attn(rope(Wqkv·norm1(x))) -> out = mid +
// Wdown·swiglu(Wgu·norm2(mid)). forward, backward_input (dgrad) and backward_weight (wgrad) are
// separate so pipeline schedules can defer W (zero bubble); backward_input leaves in the stash
// exactly what backward_weight needs. See model/glossary.h for letters and the accumulation rule.
#pragma once

#include "backend/backend.h"
#include "model/carver.h"

namespace trillion {

// What a layer keeps for backward: everything, everything but the attention core and the SwiGLU
// output (selective), or only its output (full). See plan/activation_memory.h.
enum class LayerRecompute { none, selective, full };

struct BlockWeights {  // parameters or their gradients (same layout)
  Tensor attn_norm;    // [C]
  Tensor wqkv;         // [QKV, C]: wq | wk | wv stored back to back
  Tensor wo;           // [C, NH*HD]
  Tensor mlp_norm;     // [C]
  Tensor w_gate_up;    // [2F, C]: w_gate | w_up stored back to back
  Tensor w_down;       // [C, F]
};

struct BlockActivations {  // saved by forward for backward
  Tensor x;                // [N, C] block input (residual stream)
  Tensor norm1;            // [N, C]
  Tensor rstd1;            // [N]
  Tensor qkv;              // [N, QKV] after RoPE
  Tensor attn_state;       // tiled: lse [B, NH, T]; materialised: probs [B, NH, T, T]
  Tensor attn;             // [N, NH*HD]
  Tensor mid;              // [N, C] residual after attention
  Tensor norm2;            // [N, C]
  Tensor rstd2;            // [N]
  Tensor gate_up;          // [N, 2F]
  Tensor act;              // [N, F] swiglu output
  Tensor out;              // [N, C] block output (the next block's x)
  // Carves every tensor but x (owned by the previous layer): what the layer keeps from `kept`,
  // what it recomputes from `shared` (one buffer reused by every layer).
  static BlockActivations carve(Carver& kept, Carver& shared, LayerRecompute recompute,
                                const AttentionShape& s, int64_t C, int64_t F, bool tiled);
};

struct BlockStash {  // output gradients of each weight-bearing op, for backward_weight
  Tensor d_out;      // [N, C]   dL/d(out), feeds w_down
  Tensor d_gate_up;  // [N, 2F]  feeds w_gate_up
  Tensor d_norm2;    // [N, C]   feeds mlp_norm
  Tensor d_mid;      // [N, C]   feeds wo
  Tensor d_qkv;      // [N, QKV] feeds wqkv
  Tensor d_norm1;    // [N, C]   feeds attn_norm
  static BlockStash carve(Carver& c, const AttentionShape& s, int64_t C, int64_t F);
};

struct BlockScratch {  // temporaries of backward_input, dead after it returns
  Tensor d_act;        // [N, F]
  Tensor d_attn;       // [N, NH*HD]
  static BlockScratch carve(Carver& c, const AttentionShape& s, int64_t C, int64_t F);
};

class TransformerBlock {
 public:
  TransformerBlock(Backend& backend, const AttentionShape& shape, double norm_eps, bool tiled,
                   AttentionBlocks blocks)
      : be_(backend), s_(shape), eps_(norm_eps), tiled_(tiled), blocks_(blocks) {}

  // write_out = false recomputes everything but the output (which the next layer still holds).
  void forward(const BlockWeights& w, const BlockActivations& a, const Tensor& cos_sin,
               bool write_out = true);
  // Recomputes what a layer with policy `r` did not keep (bitwise what forward produced).
  void recompute(const BlockWeights& w, const BlockActivations& a, const Tensor& cos_sin,
                 LayerRecompute r);
  // dres [N, C]: dL/d(out) on entry, dL/d(x) on exit. Fills `stash`.
  void backward_input(Tensor dres, const BlockWeights& w, const BlockActivations& a,
                      const BlockStash& stash, const BlockScratch& scratch, const Tensor& cos_sin);
  // grads += the weight gradients, from the saved activations and the stash.
  void backward_weight(const BlockWeights& grads, const BlockActivations& a,
                       const BlockStash& stash);

 private:
  Backend& be_;
  void attention_core(const BlockActivations& a);
  AttentionShape s_;
  double eps_;
  bool tiled_;
  AttentionBlocks blocks_;
};

}  // namespace trillion
