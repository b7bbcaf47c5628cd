// See activation_memory.h for the derivation.
#include "plan/activation_memory.h"

#include <algorithm>

namespace trillion::plan {

namespace {
bool layer_is_full(const ActivationPolicy& p, int64_t layer) {
  return p.recompute == Recompute::kFull && layer % p.full_every == 0;
}
}  // namespace

ActivationBytes engine_activation_bytes(const ModelSpec& m, int64_t B, int64_t seq_len,
                                        const ActivationPolicy& p, int64_t elem, int64_t stat,
                                        const StageExtent& stage, int64_t slots,
                                        const TensorSplit& split) {
  ModelSpec block = m;  // the attention and dense layers are the engine's block
  block.n_routed_experts = 0;
  require_engine_block(block);
  const int64_t T = seq_len / split.cp;  // this cp rank's rows of each sequence
  const int64_t t = split.tp;
  const bool sp = split.sequence_parallel();
  const int64_t N = B * T, C = m.d_model;
  // Inside the tp regions: this rank's heads and hidden columns. Outside: its rows (SP) or all.
  const int64_t F = m.ffn_hidden / t, A = m.n_heads * m.v_dim() / t, heads = m.n_heads / t;
  const int64_t QKV = ((m.n_heads + m.n_kv_heads) * m.qk_dim() + m.n_kv_heads * m.v_dim()) / t;
  const int64_t Nr = sp ? N / t : N;
  const int64_t gathered = sp ? N * C * elem : 0;  // one [N, C] gathered norm output / partial
  const int64_t attn_state = p.tiled_attention ? B * heads * T * stat : B * heads * T * T * elem;
  // Every tensor of one layer (the table in the header).
  // MLA's latents (whole on every tp rank, N rows: built from the gathered input under SP):
  // cq, cq_norm, ckv, ckv_norm and the two latent rstd.
  const bool q_latent = m.is_mla() && m.q_lora_rank > 0;
  const int64_t latents = m.is_mla() ? N * (2 * m.kv_lora_rank + 2 * m.q_lora_rank) * elem +
                                           N * (q_latent ? 2 : 1) * stat
                                     : 0;
  const int64_t all = (Nr * (C + C + C + C) + N * (QKV + A + 2 * F + F)) * elem + 2 * Nr * stat +
                      attn_state + 2 * gathered + latents;
  const int64_t out = Nr * C * elem;
  // Selective drops the attention core (state + output) and the SwiGLU output.
  const int64_t selective_dropped = N * (A + F) * elem + attn_state;
  // A MoE layer: the router's scores and gates and the shared experts' instead of the MLP's.
  const int64_t Nm = sp && !split.experts_tp ? Nr : N;
  const int64_t FS = m.n_shared_experts * m.expert_ffn / t;
  const int64_t moe_all =
      all - N * 3 * F * elem + (Nm * (m.n_routed_experts + m.top_k) + N * 3 * FS) * elem;
  const int64_t moe_selective_dropped = N * A * elem + attn_state;
  // norm-up drops both norm outputs and, with MLA, the normed latents and the up-projected qkv,
  // keeping the rotated shared key instead (the engine refuses norm-up with SP).
  const int64_t norm_up_dropped =
      2 * Nr * C * elem + (m.is_mla() ? N * (QKV + m.q_lora_rank + m.kv_lora_rank) * elem : 0);
  const int64_t norm_up_kept = m.is_mla() ? N * m.qk_rope_dim * elem : 0;

  ActivationBytes r;
  bool any_full = false, any_selective = false, any_norm_up = false;
  const int64_t first = stage.first_layer;
  const int64_t last = stage.n_layers < 0 ? m.n_layers : first + stage.n_layers;
  int64_t selective_scratch = 0;  // the largest layer's recomputed set
  int64_t full_scratch = 0;       // the largest fully recomputed layer's tensors but out
  for (int64_t l = first; l < last; ++l) {
    const bool moe = l >= m.dense_layers();
    const int64_t kept = moe ? moe_all : all;
    if (layer_is_full(p, l)) {
      r.stored += out;
      full_scratch = std::max(full_scratch, kept - out);
      any_full = true;
    } else if (p.recompute == Recompute::kSelective) {
      const int64_t dropped = moe ? moe_selective_dropped : selective_dropped;
      r.stored += kept - dropped;
      selective_scratch = std::max(selective_scratch, dropped);
      any_selective = true;
    } else if (p.norm_up) {
      r.stored += kept - norm_up_dropped + norm_up_kept;
      any_norm_up = true;
    } else {
      r.stored += kept;
    }
  }
  r.stored += Nr * C * elem;  // the stage's input
  // Final norm out (and, under SP, its gathered copy); rstd (Nr), lse and loss (N each).
  if (stage.has_head) r.stored += Nr * C * elem + gathered + (Nr + 2 * N) * stat;
  // Multi-token prediction on the head's stage (model/mtp.h; never under cp): each module keeps
  // its embedding lookup, both norm outputs and the concatenation's projection (the block's
  // input), two rstd, one layer without recompute (MoE like the last layer), and its head's norm
  // output (and under SP its gathered copy), rstd, lse and losses: the residual ones of the
  // rank's Nr rows.
  const int64_t mtp_block = m.n_layers - 1 >= m.dense_layers() ? moe_all : all;
  if (stage.has_head) {
    r.stored += m.mtp_depth * (mtp_block + 5 * Nr * C * elem + gathered + (3 * Nr + 2 * N) * stat);
  }
  r.stored *= slots;
  // The shared buffer: one layer's recompute set, and under SP the reduce-scatter's partial.
  const bool any_layer = last > first;
  if (any_layer) r.scratch = sp ? N * C * elem : 0;
  if (any_full) r.scratch += full_scratch;
  if (any_selective) r.scratch += selective_scratch;
  if (any_norm_up) r.scratch += norm_up_dropped;
  return r;
}

double recompute_flops_per_token(const ModelSpec& m, int64_t T, const ActivationPolicy& p,
                                 AttentionFlops attention) {
  require_engine_block(m);
  const double C = static_cast<double>(m.d_model), F = static_cast<double>(m.ffn_hidden);
  const double NH = static_cast<double>(m.n_heads), A = NH * static_cast<double>(m.v_dim());
  // The projections into Q, K, V: one [QKV, C] GEMM (GQA), or MLA's down- and up-projections.
  double qkv_weights = static_cast<double>((m.n_heads + 2 * m.n_kv_heads) * m.head_dim) * C;
  if (m.is_mla()) {
    const double DQ = static_cast<double>(m.q_lora_rank), DC = static_cast<double>(m.kv_lora_rank);
    const double HD = static_cast<double>(m.qk_dim());
    qkv_weights = (DQ > 0 ? DQ * C + NH * HD * DQ : NH * HD * C) +
                  (DC + static_cast<double>(m.qk_rope_dim)) * C +
                  NH * static_cast<double>(m.qk_nope_dim + m.v_head_dim) * DC;
  }
  // QK^T and PV: 2 T NH (d_qk + d_v) per token over the full square, half of it causal.
  const double attention_core = 2.0 * T * NH * static_cast<double>(m.qk_dim() + m.v_dim()) *
                                (attention == AttentionFlops::kCausal ? 0.5 : 1.0);
  const double layer_forward = 2.0 * (qkv_weights + A * C + 3.0 * C * F) + attention_core;
  // norm-up: MLA's up-projections (queries from their latent, or from x without one; per-head keys
  // and values from the kv latent) run again; norms are not matmuls.
  double up_projections = 0;
  if (m.is_mla()) {
    const double HD = static_cast<double>(m.qk_dim());
    up_projections = 2.0 * (NH * HD * (m.q_lora_rank > 0 ? static_cast<double>(m.q_lora_rank) : C) +
                            NH * static_cast<double>(m.qk_nope_dim + m.v_head_dim) *
                                static_cast<double>(m.kv_lora_rank));
  }
  double extra = 2.0 * m.vocab * C;  // LM head logits recomputed in backward
  for (int64_t l = 0; l < m.n_layers; ++l) {
    if (layer_is_full(p, l)) {
      extra += layer_forward;
    } else if (p.recompute == Recompute::kSelective) {
      extra += attention_core;
    } else if (p.norm_up) {
      extra += up_projections;
    }
  }
  return extra;
}

}  // namespace trillion::plan
