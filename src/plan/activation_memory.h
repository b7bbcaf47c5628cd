// Activation memory and recompute FLOPs of the engine's own block (model/block.h), per policy.
// This is the formula the engine's measured allocation is tested against (tests/unit), and the
// extra FLOPs that turn MFU into HFU. Derivation (N = B*T tokens, A = NH*HD, QKV = (NH+2KV)*HD,
// elem = bytes per stored activation element, stat = bytes per stored statistic):
//
// What one layer's forward keeps for backward, without recompute (Korthikanti 2205.05198 §4
// counts the same way for a GPT block; ours has no biases, no dropout masks, RMSNorm instead of
// LayerNorm, SwiGLU instead of GeLU, and no s^2 term under FlashAttention):
//   norm1 out  N*C       input of the QKV GEMM (its wgrad)          elem
//   rstd1      N         1/rms for the norm's backward              stat
//   qkv        N*QKV     Q, K after RoPE (in place), V               elem
//   attn state B*NH*T    log-sum-exp per score row (tiled)          stat
//              B*NH*T*T  probabilities (materialised reference)     elem
//   attn out   N*A       input of wo (its wgrad), O for dQ/dK/dV     elem
//   mid        N*C       residual after attention: norm2's input    elem
//   norm2 out  N*C       input of the gate/up GEMM                  elem
//   rstd2      N                                                    stat
//   gate_up    N*2F      SwiGLU's input                             elem
//   act        N*F       input of w_down                            elem
//   out        N*C       block output = next block's input          elem
// Multi-head latent attention (model/mla.h) has QKV = (2*NH*HD + NH*VD) with HD = qk_nope +
// qk_rope (one K/V head per query head), A = NH*VD, and keeps its latents besides:
//   cq, cq_norm  2*N*DQ  the query latent before/after its norm    elem   (q_lora_rank > 0)
//   rstd_q       N                                                 stat   (q_lora_rank > 0)
//   ckv, ckv_norm 2*N*DC the kv latent before/after its norm       elem
//   rstd_kv      N                                                 stat
// (replicated over tp and whole N rows under SP: they come from the gathered input). Selective
// and full recompute treat them like norm1 (kept, resp. recomputed).
// Selective recompute drops what is cheap to recompute and large: the attention core (attn
// state and attn out, recomputed from qkv) and the SwiGLU output (from gate_up); full recompute
// keeps only `out` (the next layer's input) and recomputes the block from its input. Recomputed
// tensors live in one shared per-model buffer sized for one layer (allocated once if any layer
// needs it), so the peak is stored layers + one layer's recompute set. Stage-level tensors: the
// stage input N*C (the embedding output on the first stage, the received activation on the
// others) and, on the stage with the head, the final norm output N*C, its rstd N, the loss lse N
// and the per-position losses N. A stage keeps one copy of everything but the recompute buffer
// per activation slot (micro-batch in flight). Multi-token prediction adds, on the head's stage,
// per module: one layer kept whole (its block never recomputes; a MoE layer's when the last
// layer is MoE) plus 5 N*C elem (the embedding
// lookup, its norm, the hidden state's norm, the projected block input, the module head's norm
// output) and 5 N stat (two norm rstd, the head's rstd, lse and losses); under SP the N*C ones
// and the three rstd hold the rank's N/tp rows and the head keeps its gathered input N*C.
//
// Tensor parallelism over tp ranks (TensorSplit; Korthikanti 2205.05198 §4.2) divides what lives
// inside the tp regions by tp: qkv, the attention state and output, gate_up and act (this rank's
// heads and hidden columns). Without sequence parallelism the rest (norm outputs, rstd, mid, out,
// the stage input, the head's final norm) is whole on every rank. With SP it holds the rank's
// N/tp token rows, but each layer also keeps the two gathered norm outputs norm1_full and
// norm2_full, N*C each (the column-parallel GEMMs' inputs, needed for their weight gradients:
// 2*N*C per layer that Korthikanti's 34/t counts as sharded, because Megatron re-gathers them in
// backward instead of keeping them), the head keeps its gathered input N*C, and the shared
// buffer holds one [N, C] partial sum for the reduce-scatters (scratch, even without recompute).
// lse and the losses stay [N] on every rank (the vocabulary-parallel loss reduces them).
//
// A MoE layer (model/moe.h) keeps, instead of gate_up and act: the router's scores and gates
// Nm*(E+K) (Nm: the rows it routes, N, or N/tp under SP with whole experts over tp x ep) and the
// shared experts' gate_up and act N*3*FS/tp (FS = n_shared * FE); selective recompute keeps all of
// them (it drops only the attention core); full recompute keeps only `out` and recomputes the
// rest, the router's and shared experts' tensors included, in the shared buffer (sized for the
// largest fully recomputed layer, MoE or dense). The routed experts' rows are allocated per
// micro-batch and freed by its backward_weight (after a forward-only pass, by
// StageModel::release_expert_rows; under full recompute right after the layer's forward, and
// allocated again by its recompute): they depend on the routing and are not in this formula.
#pragma once

#include <cstdint>

#include "plan/layout.h"
#include "plan/model_spec.h"

namespace trillion::plan {

struct ActivationPolicy {
  Recompute recompute = Recompute::kNone;
  int64_t full_every = 1;  // full recompute on layers l with l % full_every == 0
  bool tiled_attention = true;
  // DeepSeek-V3's norm-up (with recompute kNone): every layer recomputes its RMSNorm outputs and
  // MLA's up-projected Q, K, V (the qkv buffer) in backward; MLA then keeps the rotated shared key
  // k_R (N*DR) instead.
  bool norm_up = false;
};

struct ActivationBytes {
  int64_t stored = 0;   // kept across the forward pass, all layers + model-level tensors
  int64_t scratch = 0;  // the shared recompute buffer (0 without recompute)
  int64_t total() const { return stored + scratch; }
};

// The layers of one pipeline stage (a StageModel): global layers [first_layer, first_layer +
// n_layers), and whether the LM head (final norm + loss) is on it. n_layers < 0: every layer.
struct StageExtent {
  int64_t first_layer = 0;
  int64_t n_layers = -1;
  bool has_head = true;
};

// The tensor-parallel split of a layer: tp ranks, sequence parallelism on or off; and the
// context-parallel degree: each cp rank holds T/cp rows of every sequence, so every activation
// above is that of a T/cp sequence (the tiled attention state included: lse is B NH T/cp; ring
// attention never forms a T x T matrix). The K/V blocks ring attention receives are workspace,
// not activations: plan/context_ring.h.
struct TensorSplit {
  int64_t tp = 1;
  bool sp = false;
  int64_t cp = 1;
  // MoE layers under tp: false (the engine's parallel.expert_tp = 1) routes the rank's N/tp SP
  // rows, true (expert_tp = tp) routes all N gathered rows (docs/moe.md).
  bool experts_tp = false;
  bool sequence_parallel() const { return sp && tp > 1; }
};

// Activation bytes of one stage with `slots` micro-batches in flight (the whole model, one slot,
// by default), on one tp rank. m must be the engine's block (require_engine_block); tp must
// divide the heads, kv heads and ffn width, and under SP the batch * seq_len rows.
ActivationBytes engine_activation_bytes(const ModelSpec& m, int64_t batch, int64_t seq_len,
                                        const ActivationPolicy& policy, int64_t elem_bytes,
                                        int64_t stat_bytes, const StageExtent& stage = {},
                                        int64_t slots = 1, const TensorSplit& split = {});

// Extra FLOPs per token that recomputation adds to a training step (count them for HFU, not
// MFU), in the convention of model_flops_per_token with the same attention convention: matmul
// FLOPs and the attention scores (full square or causal half). Includes the LM head's logits,
// which the fused loss recomputes in backward under every policy.
double recompute_flops_per_token(const ModelSpec& m, int64_t seq_len,
                                 const ActivationPolicy& policy, AttentionFlops attention);

}  // namespace trillion::plan
