// Block module: one pre-norm Llama block, x -> mid = x + Attention(norm1(x)) -> out = mid +
// Mlp(norm2(mid)). forward, backward_input (dgrad) and backward_weight (wgrad) are separate so
// pipeline schedules can defer W (zero bubble); backward_input leaves in the stash exactly what
// backward_weight needs. Recompute policies choose what forward keeps (see
// plan/activation_memory.h). See model/glossary.h for letters and the accumulation rule.
//
// Tensor parallelism (ctx.tp, Megatron-LM): wqkv and w_gate_up are column-parallel (this rank's
// heads / hidden columns), wo and w_down row-parallel; each sublayer is one tp region entered
// through copy_to_tp and left through reduce_from_tp (parallel/tensor_comm.h), so per layer and
// micro-batch: 2 all-reduces of [N, C] forward (the outputs) and 2 backward (the input
// gradients). With sequence parallelism (ctx.sp) the block's x, norms, mid and out hold only the
// rank's N/tp rows; the sublayer inputs are all-gathered (norm1_full, norm2_full, kept for the
// weight gradients) and the outputs reduce-scattered; backward mirrors it. Norm weight gradients
// are then partial over the rank's rows and must be summed over tp before the optimizer
// (reduce_replicated_gradients); without SP every tp rank computes them whole and identical.
// A MoE layer under ctx.moe_slice (tp with parallel.expert_tp = 1): the shared experts are a tp
// region like the dense MLP (norm2 gathered, output reduce-scattered), while the router and the
// routed experts take the rank's own N/tp rows of norm2 directly (their all-to-all spans tp x ep:
// each token is routed once, and no tp collective touches the routed rows). Under ctx.experts_tp
// (parallel.expert_tp = tp) the whole MoE layer is a tp region like the MLP: gathered rows in,
// each expert's column-/row-parallel partial output reduce-scattered out.
#pragma once

#include <optional>

#include "model/attention.h"
#include "model/mla.h"
#include "model/mlp.h"
#include "model/moe.h"

namespace trillion {

// What a layer keeps for backward: everything, everything but the attention core and the SwiGLU
// output (selective), only its output (full), or everything but the norm outputs and MLA's
// up-projections (norm_up). See plan/activation_memory.h.
// norm_up (DeepSeek-V3 §3.2.3): keeps everything but the norm outputs and, under MLA, the normed
// latents and the up-projected qkv (recomputed from the kept pre-norm latents and the rotated
// shared key).
enum class LayerRecompute { none, selective, full, norm_up };

struct BlockWeights {  // parameters or their gradients (same layout)
  Tensor attn_norm;    // [C]
  AttentionWeights attn;  // GQA
  MlaWeights mla;         // MLA (model.attention = "mla")
  Tensor mlp_norm;  // [C]
  MlpWeights mlp;
  MoeWeights moe;  // MoE layers (their mlp is empty)
};

struct BlockActivations {  // saved by forward for backward
  Tensor x;                // [N, C] block input (owned by the previous layer or the stage)
  Tensor norm1;            // [N, C]
  Tensor rstd1;            // [N]
  Tensor norm1_full;       // [N, C] SP only: norm1 gathered over tp (the attention's input)
  AttentionActivations attn;  // the attention core's tensors (GQA and MLA)
  MlaActivations mla;         // MLA's latents
  Tensor mid;    // [N, C] residual after attention
  Tensor norm2;  // [N, C]
  Tensor rstd2;  // [N]
  Tensor norm2_full;  // [N, C] SP only: norm2 gathered over tp (the MLP's input)
  MlpActivations mlp;
  MoeState* moe = nullptr;  // MoE layers: the micro-batch's MoE state (their mlp is empty)
  Tensor out;               // [N, C] block output (the next block's x)
  // SP only, not kept: the [N, C] partial sum a row-parallel GEMM writes before its
  // reduce-scatter (carved from the shared buffer).
  Tensor partial;
};
// Under SP the residual tensors (x, norm1, rstd1, mid, norm2, rstd2, out) have N/tp rows.

struct BlockStash {  // output gradients of each weight-bearing op, for backward_weight
  Tensor d_out;      // [N, C] dL/d(out), feeds w_down (SP: gathered over tp)
  Tensor d_norm2;    // [N, C] feeds mlp_norm (SP: N/tp rows)
  Tensor d_mid;      // [N, C] feeds wo (SP: gathered over tp)
  Tensor d_norm1;    // [N, C] feeds attn_norm (SP: N/tp rows)
  MlpStash mlp;
  AttentionStash attn;
  MlaStash mla;
};

struct BlockScratch {  // temporaries of backward_input, dead after it returns
  Tensor d_act;        // [N, F]
  Tensor d_heads;      // [N, NH*VD]
};

class Block {
 public:
  // moe: the MoE module of the model's MoE layers (nullptr for a dense model). mla: the MLA
  // dimensions when the attention sublayer is multi-head latent attention (nullptr: GQA).
  Block(Backend& backend, const ParallelContext& ctx, double norm_eps, bool tiled,
        AttentionBlocks blocks, Moe* moe = nullptr, const MlaConfig* mla = nullptr)
      : be_(backend),
        ctx_(ctx),
        eps_(norm_eps),
        attention_(backend, ctx, tiled, blocks),
        mlp_(backend, ctx),
        moe_(moe) {
    if (mla != nullptr) mla_.emplace(backend, ctx, *mla, norm_eps, tiled, blocks);
  }

  // Carves every tensor but x: what the layer keeps from `kept`, what it recomputes from
  // `shared` (one buffer reused by every layer of the stage). moe: a MoE layer's state (its
  // router and shared experts keep their tensors; nothing of a MoE layer is recomputed).
  BlockActivations carve(Carver& kept, Carver& shared, LayerRecompute recompute,
                         MoeState* moe = nullptr) const;
  BlockStash carve_stash(Carver& c) const;
  BlockScratch carve_scratch(Carver& c) const;

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
  // out = residual + the sum over tp of what `partial_into` accumulates into its argument (a
  // row-parallel GEMM with beta 1): reduce_from_tp, or reduce_scatter_sp under SP.
  template <typename PartialInto>
  void residual_exit(const Tensor& out, const Tensor& residual, const Tensor& partial,
                     PartialInto partial_into);
  // The MoE sublayer under ctx.moe_slice (see the header comment).
  void moe_slice_forward(const BlockWeights& w, const BlockActivations& a);
  void moe_slice_backward_input(const Tensor& dres, const BlockWeights& w,
                                const BlockActivations& a, const BlockStash& g);

  Backend& be_;
  const ParallelContext& ctx_;
  double eps_;
  Attention attention_;
  Mlp mlp_;
  Moe* moe_;
  std::optional<Mla> mla_;  // set: the attention sublayer is MLA
};

// Sums the gradients of the tp-replicated tensors a sequence-parallel block computes from its
// token slice only (the norm weights) over tp, in place; with MLA also its down-projections and
// latent norms (partial over the rank's heads, with or without SP). Call once per step after the
// last micro-batch's backward.
void reduce_replicated_gradients(const ParallelContext& ctx, const BlockWeights& grads);

}  // namespace trillion
