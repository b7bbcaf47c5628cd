// See activation_memory.h for the derivation.
#include "plan/activation_memory.h"

namespace trillion::plan {

namespace {
bool layer_is_full(const ActivationPolicy& p, int64_t layer) {
  return p.recompute == Recompute::kFull && layer % p.full_every == 0;
}
}  // namespace

ActivationBytes engine_activation_bytes(const ModelSpec& m, int64_t B, int64_t T,
                                        const ActivationPolicy& p, int64_t elem, int64_t stat,
                                        const StageExtent& stage, int64_t slots) {
  require_engine_block(m);
  const int64_t N = B * T, C = m.d_model, F = m.ffn_hidden, A = m.n_heads * m.head_dim;
  const int64_t QKV = (m.n_heads + 2 * m.n_kv_heads) * m.head_dim;
  const int64_t attn_state =
      p.tiled_attention ? B * m.n_heads * T * stat : B * m.n_heads * T * T * elem;
  // Every tensor of one layer (the table in the header).
  const int64_t all = N * (C + QKV + A + C + C + 2 * F + F + C) * elem + 2 * N * stat + attn_state;
  const int64_t out = N * C * elem;
  // Selective drops the attention core (state + output) and the SwiGLU output.
  const int64_t selective_dropped = N * (A + F) * elem + attn_state;

  ActivationBytes r;
  bool any_full = false, any_selective = false;
  const int64_t first = stage.first_layer;
  const int64_t last = stage.n_layers < 0 ? m.n_layers : first + stage.n_layers;
  for (int64_t l = first; l < last; ++l) {
    if (layer_is_full(p, l)) {
      r.stored += out;
      any_full = true;
    } else if (p.recompute == Recompute::kSelective) {
      r.stored += all - selective_dropped;
      any_selective = true;
    } else {
      r.stored += all;
    }
  }
  r.stored += N * C * elem;                                     // the stage's input
  if (stage.has_head) r.stored += N * C * elem + 3 * N * stat;  // final norm out; rstd, lse, loss
  r.stored *= slots;
  if (any_full) r.scratch = all - out;
  if (any_selective) r.scratch = selective_dropped;
  return r;
}

double recompute_flops_per_token(const ModelSpec& m, int64_t T, const ActivationPolicy& p,
                                 AttentionFlops attention) {
  require_engine_block(m);
  const double C = static_cast<double>(m.d_model), F = static_cast<double>(m.ffn_hidden);
  const double A = static_cast<double>(m.n_heads * m.head_dim);
  const double QKV = static_cast<double>((m.n_heads + 2 * m.n_kv_heads) * m.head_dim);
  // QK^T and PV: 4 T A per token over the full square, half of it causal.
  const double attention_core = 4.0 * T * A * (attention == AttentionFlops::kCausal ? 0.5 : 1.0);
  const double layer_forward = 2.0 * (C * QKV + A * C + 3.0 * C * F) + attention_core;
  double extra = 2.0 * m.vocab * C;  // LM head logits recomputed in backward
  for (int64_t l = 0; l < m.n_layers; ++l) {
    if (layer_is_full(p, l)) {
      extra += layer_forward;
    } else if (p.recompute == Recompute::kSelective) {
      extra += attention_core;
    }
  }
  return extra;
}

}  // namespace trillion::plan
