// See memory.h.
#include "plan/memory.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace trillion::plan {

ModelStates zero_model_states(double params, int stage, int n_d, double param_bytes,
                              double grad_bytes, double optimizer_bytes) {
  TRILLION_CHECK(stage >= 0 && stage <= 3 && n_d >= 1, "ZeRO stage 0..3 over n_d >= 1 ranks");
  const double n = n_d;
  return {params * param_bytes / (stage >= 3 ? n : 1.0),
          params * grad_bytes / (stage >= 2 ? n : 1.0),
          params * optimizer_bytes / (stage >= 1 ? n : 1.0)};
}

double korthikanti_layer_bytes(double s, double b, double h, double a, int t, bool sp,
                               Recompute recompute) {
  const double sbh = s * b * h;
  switch (recompute) {
    case Recompute::kFull:
      return 2 * sbh;
    case Recompute::kSelective:
      return sp ? 34 * sbh / t : sbh * (10 + 24.0 / t);
    case Recompute::kNone:
      return sp ? sbh * (34.0 / t + 5 * a * s / (h * t))
                : sbh * (10 + 24.0 / t + 5 * a * s / (h * t));
  }
  return 0;
}

std::vector<ActivationTerm> gpt_block_terms(double s, double h, double a) {
  // Korthikanti §4.1, per token (sb) of one layer: 2-byte tensors, 1-byte dropout masks; the
  // softmax terms are a*s per token (2as^2b per sequence).
  return {
      {"layernorm 1 input", 2 * h, false, true},
      {"QKV input", 2 * h, false, true},
      {"Q and K (for QK^T)", 4 * h, true, true},
      {"softmax output", 2 * a * s, true, false},
      {"softmax dropout mask", a * s, true, false},
      {"dropout output (for xV)", 2 * a * s, true, false},
      {"V", 2 * h, true, true},
      {"output projection input", 2 * h, true, true},
      {"attention dropout mask", h, false, true},
      {"layernorm 2 input", 2 * h, false, true},
      {"MLP input", 2 * h, false, true},
      {"GeLU input", 8 * h, true, true},
      {"GeLU output", 8 * h, true, true},
      {"MLP dropout mask", h, false, true},
  };
}

std::vector<ActivationTerm> block_terms(const ModelSpec& m, bool moe, double e) {
  const double h = m.d_model, nh = m.n_heads;
  const double kv = m.is_mla() ? nh : m.n_kv_heads;  // MLA expands K and V per head
  std::vector<ActivationTerm> t = {
      {"residual input (RMSNorm 1 input)", e * h, false, true},
      {"RMSNorm 1 output (QKV input)", e * h, false, true},
      {"Q after RoPE", e * nh * m.qk_dim(), true, true},
      {"K after RoPE and V", e * kv * (m.qk_dim() + m.v_dim()), true, true},
      {"attention output O (output projection input)", e * nh * m.v_dim(), true, false},
      {"FlashAttention logsumexp (fp32)", 4 * nh, true, false},
      {"residual after attention (RMSNorm 2 input)", e * h, false, true},
      {"RMSNorm 2 output (MLP input)", e * h, false, true},
      {"RMSNorm 1/rms (fp32, both norms)", 8, false, true},
  };
  if (m.is_mla()) {
    const double latents = (m.q_lora_rank > 0 ? m.q_lora_rank : 0) + m.kv_lora_rank;
    t.push_back(
        {"MLA latents and their norm outputs", 2 * e * latents + e * m.qk_rope_dim, false, true});
  }
  if (!moe) {
    const double f = m.ffn_hidden;
    if (m.mlp == MlpKind::kSwiGlu) {
      t.push_back({"SwiGLU gate and up outputs", 2 * e * f, true, true});
      t.push_back({"SwiGLU product (down projection input)", e * f, true, false});
    } else {
      t.push_back({"GeLU input", e * f, true, true});
      t.push_back({"GeLU output (down projection input)", e * f, true, false});
    }
  } else {
    const double k = m.top_k, fe = m.expert_ffn, shared = m.n_shared_experts;
    t.push_back({"router scores (fp32)", 4.0 * m.n_routed_experts, true, true});
    t.push_back(
        {"dispatched tokens (expert inputs) and expert outputs", 2 * e * k * h, true, true});
    t.push_back({"expert gate and up outputs", 2 * e * (k + shared) * fe, true, true});
    t.push_back({"expert SwiGLU products", e * (k + shared) * fe, true, false});
  }
  return t;
}

double layer_bytes_per_token(const std::vector<ActivationTerm>& terms, int t, bool sp,
                             Recompute recompute, double input_bytes_per_token) {
  if (recompute == Recompute::kFull) return input_bytes_per_token / (sp ? t : 1);
  double sum = 0;
  for (const ActivationTerm& term : terms) {
    if (recompute == Recompute::kSelective && !term.kept_selective) continue;
    sum += term.bytes_per_token / (term.tp_sharded || sp ? t : 1);
  }
  return sum;
}

StageShape stage_shape(const ModelSpec& m, const Layout& l) {
  const ModelCounts c = count_model(m);
  const double layer_params =
      static_cast<double>(c.matmul_active - m.vocab * m.d_model) / m.n_layers;
  const double head_layers = m.vocab * m.d_model / layer_params;
  StageShape s;
  const bool dual = l.pp > 1 && l.schedule == schedule::ScheduleKind::kDualPipe;
  const int chunks = l.pp > 1 && l.schedule == schedule::ScheduleKind::kInterleaved ? l.chunks : 1;
  const double per_chunk = (m.n_layers + (l.pp > 1 ? head_layers : 0.0)) / (l.pp * chunks);
  const int chunk_layers = std::max(1, static_cast<int>(std::ceil(per_chunk - 1e-9)));
  s.layers_per_stage = chunk_layers * chunks;
  s.layers_per_rank = dual ? 2 * s.layers_per_stage : s.layers_per_stage;
  if (l.pp == 1) s.layers_per_rank = s.layers_per_stage = m.n_layers;
  s.moe_fraction = static_cast<double>(m.moe_layers()) / m.n_layers;
  return s;
}

double inflight_microbatches(const Layout& l, int m) {
  const double p = l.pp;
  if (l.pp == 1) return 1;
  switch (l.schedule) {
    case schedule::ScheduleKind::kGPipe:
      return m;
    case schedule::ScheduleKind::k1F1B:
    case schedule::ScheduleKind::kZbH1:
      return std::min<double>(p, m);
    case schedule::ScheduleKind::kZbH2:
      return std::min<double>(2 * p - 1, m);
    case schedule::ScheduleKind::kInterleaved:
      return p * (1 + (p - 1) / (p * l.chunks));
    case schedule::ScheduleKind::kDualPipe:
      return p + 1;
  }
  return p;
}

LocalParams params_per_gpu(const ModelSpec& m, const Layout& l) {
  const ModelCounts c = count_model(m);
  const StageShape st = stage_shape(m, l);
  const bool dual = l.pp > 1 && l.schedule == schedule::ScheduleKind::kDualPipe;
  const double dense_per_layer =
      static_cast<double>(c.dense_total - c.embedding - c.head) / m.n_layers;
  const double ends = l.pp == 1 || dual ? c.embedding + c.head : std::max(c.embedding, c.head);
  LocalParams p;
  p.dense = (st.layers_per_rank * dense_per_layer + ends) / l.tp;
  p.expert = st.layers_per_rank * st.moe_fraction * static_cast<double>(m.n_routed_experts) *
             c.expert / (static_cast<double>(l.ep) * l.tp);
  return p;
}

MemoryBreakdown memory_per_gpu(const ModelSpec& m, const Layout& l, int64_t seq_len,
                               int microbatches) {
  const ModelCounts c = count_model(m);
  const StageShape st = stage_shape(m, l);
  const bool dual = l.pp > 1 && l.schedule == schedule::ScheduleKind::kDualPipe;
  const double dense_per_layer =
      static_cast<double>(c.dense_total - c.embedding - c.head) / m.n_layers;
  const double experts_per_moe_layer = static_cast<double>(m.n_routed_experts) * c.expert;
  const LocalParams local = params_per_gpu(m, l);
  const double dense_params = local.dense, expert_params = local.expert;
  MemoryBreakdown mem;
  const ModelStates dense = zero_model_states(dense_params, l.zero, l.dp * l.cp);
  const ModelStates expert =
      zero_model_states(expert_params, l.zero, std::max(1, l.dp * l.cp / l.ep));
  mem.weights = dense.parameters + expert.parameters;
  mem.gradients = dense.gradients + expert.gradients;
  mem.optimizer = dense.optimizer + expert.optimizer;

  // Activations: 16-bit storage for every precision (FP8 recipes keep some GEMM inputs in FP8,
  // which this conservatively ignores).
  const double e = 2.0;
  const bool sp = l.tp > 1;
  const double tokens = static_cast<double>(l.micro_batch) * seq_len / l.cp;
  const double dense_tok =
      layer_bytes_per_token(block_terms(m, false, e), l.tp, sp, l.recompute, e * m.d_model);
  const double moe_tok = m.is_moe() ? layer_bytes_per_token(block_terms(m, true, e), l.tp, sp,
                                                            l.recompute, e * m.d_model)
                                    : dense_tok;
  const double per_layer = tokens * (st.moe_fraction * moe_tok + (1 - st.moe_fraction) * dense_tok);
  const double unit_layers = dual ? st.layers_per_stage : st.layers_per_rank;
  mem.activations = per_layer * unit_layers * inflight_microbatches(l, microbatches);

  // Temporaries: fp32 logits and their gradient on the head's rank (vocab-parallel over TP);
  // under full recompute one layer's complete activations while it is recomputed; under ZeRO-3
  // two layers' gathered bf16 weights (prefetch); MoE dispatch send+receive buffers.
  mem.temporary = tokens * m.vocab / l.tp * 8.0;
  if (l.recompute == Recompute::kFull)
    mem.temporary += tokens * layer_bytes_per_token(block_terms(m, m.is_moe(), e), l.tp, sp,
                                                    Recompute::kNone, e * m.d_model);
  if (l.zero == 3)
    mem.temporary +=
        2 * 2.0 *
        (dense_per_layer / l.tp + st.moe_fraction * experts_per_moe_layer / (l.ep * l.tp));
  if (m.is_moe()) mem.temporary += 2 * tokens / l.tp * m.top_k * m.d_model * e;
  // CUDA context, NCCL and cuBLAS workspaces (~3 GB measured on Hopper jobs) plus 5% allocator
  // fragmentation of the dynamic part.
  mem.overhead = 3e9 + 0.05 * (mem.activations + mem.temporary);
  return mem;
}

}  // namespace trillion::plan
