// See prefill.h.
#include "plan/prefill.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "plan/context_ring.h"
#include "plan/efficiency.h"
#include "plan/memory.h"
#include "plan/units.h"

namespace trillion::plan {
namespace {

// Columns of a tensor-parallel matrix on one rank: split when it divides, else replicated.
double split(double features, int tp) {
  return std::fmod(features, tp) == 0 ? features / tp : features;
}

struct LayerForward {
  double gemm = 0, attention = 0, elementwise = 0, tp = 0, cp = 0;
  double total() const { return gemm + attention + elementwise + tp + cp; }
};

double bytes_per_weight(Precision p) {
  return p == Precision::kFp8 || p == Precision::kFp4 ? 1.0 : 2.0;
}

// One layer's forward for this rank's T = S/cp tokens.
LayerForward layer_forward(const ModelSpec& m, const Gpu& gpu, int64_t S, const PrefillLayout& l,
                           bool moe) {
  const int t = l.tp;
  const double T = static_cast<double>(S) / l.cp, h = static_cast<double>(m.d_model),
               nh = static_cast<double>(m.n_heads);
  // The FFN's (and experts') GEMMs run in the layout's precision; the attention projections
  // too unless only the FFN is quantised (then they stay in bf16).
  const Precision ffn_p = l.precision;
  const double e = bytes_per_weight(ffn_p);
  const Precision attn_p = l.low_precision_ffn_only ? Precision::kBf16 : l.precision;
  const double attn_e = bytes_per_weight(attn_p);
  LayerForward r;
  auto linear = [&](double out, double in) {
    r.gemm += gemm_seconds(gpu, ffn_p, T, out, in, 1, e);
  };
  auto attention_linear = [&](double out, double in) {
    r.gemm += gemm_seconds(gpu, attn_p, T, out, in, 1, attn_e);
  };
  if (m.is_mla()) {
    const double q_in = m.q_lora_rank > 0 ? static_cast<double>(m.q_lora_rank) : h;
    if (m.q_lora_rank > 0) attention_linear(static_cast<double>(m.q_lora_rank), h);
    attention_linear(split(nh * m.qk_dim(), t), q_in);
    attention_linear(static_cast<double>(m.kv_lora_rank + m.qk_rope_dim), h);
    attention_linear(split(nh * (m.qk_nope_dim + m.v_head_dim), t),
                     static_cast<double>(m.kv_lora_rank));
  } else {
    attention_linear(
        split(nh * m.head_dim, t) + 2 * split(static_cast<double>(m.n_kv_heads * m.head_dim), t),
        h);
  }
  attention_linear(h, split(nh * m.v_dim(), t));
  if (!moe) {
    const double f = split(static_cast<double>(m.ffn_hidden), t);
    linear(m.mlp == MlpKind::kSwiGlu ? 2 * f : f, h);
    linear(h, f);
  } else {
    linear(static_cast<double>(m.n_routed_experts), h);
    const double fe = split(static_cast<double>(m.expert_ffn), t);
    const double experts = static_cast<double>(m.n_routed_experts);
    const double per_expert = std::max(1.0, T * m.top_k / experts);
    r.gemm += gemm_seconds(gpu, l.precision, per_expert, 2 * fe, h, experts, e) +
              gemm_seconds(gpu, l.precision, per_expert, h, fe, experts, e);
    if (m.n_shared_experts > 0) {
      const double fs = split(static_cast<double>(m.n_shared_experts * m.expert_ffn), t);
      linear(2 * fs, h);
      linear(h, fs);
    }
  }
  // This rank's 1/cp of the causal attention (zigzag), its heads; forward only (a third of the
  // training count).
  const double flops = T * attention_flops_per_token_layer(m, S, AttentionFlops::kCausal) / 3 / t;
  r.attention = flash_attention_inference_seconds(gpu, flops, T);
  // Elementwise: one pass over the layer's activations (norms, RoPE, SwiGLU, residuals).
  const std::vector<ActivationTerm> terms = block_terms(m, moe, static_cast<double>(S), {2, 4});
  r.elementwise =
      memory_seconds(gpu, T * layer_bytes_per_token(terms, t, true, RecomputePolicy::kNone, 0));
  if (t > 1) {
    const LinkCost link = link_cost(gpu, link_of(gpu, t));
    r.tp = 2 * all_reduce_seconds(link, T * h * 2.0, t);
  }
  if (l.cp > 1) {
    const LinkCost link = link_cost(gpu, link_of(gpu, static_cast<long>(t) * l.cp));
    const double block =
        static_cast<double>(context_ring_block_bytes(m, 1, S, 2, {t, false, l.cp}, CpMla::heads));
    r.cp = l.cp_all_gather
               ? all_gather_seconds(link, block * l.cp, l.cp)
               : context_ring_exposed_seconds(l.cp, block, link, r.attention, 0).forward;
  }
  return r;
}

}  // namespace

std::string PrefillLayout::to_string() const {
  return fmt::format(
      "tp={},cp={},pp={},cp_comm={},precision={}{}", tp, cp, pp,
      cp_all_gather ? "allgather" : "ring", precision_name(precision),
      low_precision_ffn_only && bytes_per_weight(precision) < 2 ? ",linears=ffn" : "");
}

PrefillEstimate estimate_prefill(const ModelSpec& m, const Gpu& gpu, int64_t S,
                                 const PrefillLayout& l) {
  if (l.tp < 1 || m.n_heads % l.tp != 0 || l.tp > gpu.nvlink_domain)
    throw Error(
        fmt::format("prefill tp={}: must divide the {} heads and fit the {}-GPU NVLink "
                    "domain",
                    l.tp, m.n_heads, gpu.nvlink_domain));
  if (l.cp < 1 || S % l.cp != 0)
    throw Error(fmt::format("prefill cp={}: must divide the {} tokens", l.cp, S));
  if (l.pp < 1 || l.pp > m.n_layers)
    throw Error(fmt::format("prefill pp={}: {} has {} layers", l.pp, m.name, m.n_layers));
  if (gpu.peak(l.precision) <= 0)
    throw Error(fmt::format("{} has no dense {} peak; use --precision with one of: {}", gpu.model,
                            precision_name(l.precision), gpu.precisions()));
  PrefillEstimate r;
  r.layout = l;
  const LayerForward dense = layer_forward(m, gpu, S, l, false);
  const LayerForward moe = m.is_moe() ? layer_forward(m, gpu, S, l, true) : dense;
  const double L_dense = static_cast<double>(m.dense_layers()),
               L_moe = static_cast<double>(m.moe_layers());
  auto add = [&](const LayerForward& f, double n) {
    r.gemm += n * f.gemm, r.attention += n * f.attention, r.elementwise += n * f.elementwise;
    r.tp_comm += n * f.tp, r.cp_comm += n * f.cp;
  };
  add(dense, L_dense);
  add(moe, L_moe);
  const double T = static_cast<double>(S) / l.cp, h = static_cast<double>(m.d_model);
  const double e = bytes_per_weight(l.precision);
  // Embedding, head and attention weights stay in bf16 when only the FFN is quantised.
  const Precision other_p = l.low_precision_ffn_only ? Precision::kBf16 : l.precision;
  const double other_e = bytes_per_weight(other_p);
  // The first token's logits: the last position's final norm and head GEMM (vocabulary over TP).
  r.head = gemm_seconds(gpu, other_p, 1, split(static_cast<double>(m.vocab), l.tp), h, 1, other_e);
  if (l.pp > 1)
    r.pp_comm =
        (l.pp - 1) * p2p_seconds(link_cost(gpu, link_of(gpu, 2L * l.tp * l.cp)), T * h * 2.0);
  r.seconds = r.gemm + r.attention + r.elementwise + r.tp_comm + r.cp_comm + r.pp_comm + r.head;
  r.model_flops =
      static_cast<double>(S) * (2.0 * static_cast<double>(count_model(m).matmul_active) +
                                attention_flops_per_token_layer(m, S, AttentionFlops::kCausal) / 3 *
                                    static_cast<double>(m.n_layers));

  // Memory of the fullest stage: ceil(L / pp) layers and the embedding (or the head).
  const ModelCounts c = count_model(m);
  const double layers = std::ceil(static_cast<double>(m.n_layers) / l.pp);
  const double layer_params =
      static_cast<double>(c.total - c.mtp - c.embedding - c.head) /  // inference: no MTP
      static_cast<double>(m.n_layers);
  // The attention matrices (and norms) of a layer: bf16 when only the FFN is quantised.
  const double attention_params = static_cast<double>(c.attention + c.norms);
  const double ends = l.pp == 1 ? static_cast<double>(c.embedding + c.head)
                                : static_cast<double>(std::max(c.embedding, c.head));
  r.weights = l.low_precision_ffn_only
                  ? (layers * ((layer_params - attention_params) * e + attention_params * other_e) +
                     ends * other_e) /
                        l.tp
                  : (layers * layer_params + ends) / l.tp * e;
  const double kv_per_token_layer =
      m.is_mla() ? 2.0 * (m.kv_lora_rank + m.qk_rope_dim)
                 : 2.0 * 2.0 * split(static_cast<double>(m.n_kv_heads), l.tp) * m.head_dim;
  r.kv_cache = T * layers * kv_per_token_layer;
  const std::vector<ActivationTerm> terms =
      block_terms(m, m.is_moe(), static_cast<double>(S), {2, 4});
  const double block =
      static_cast<double>(context_ring_block_bytes(m, 1, S, 2, {l.tp, false, l.cp}, CpMla::heads));
  r.workspace = T * layer_bytes_per_token(terms, l.tp, true, RecomputePolicy::kNone, 0) +
                (l.cp > 1 ? (l.cp_all_gather ? block * l.cp : 2 * block) : 0.0);
  r.overhead = gpu.overhead_bytes;
  return r;
}

PrefillSearch search_prefill(const ModelSpec& m, const Gpu& gpu, long gpus, int64_t S,
                             const std::vector<Precision>& precisions, int fixed_tp, int fixed_cp,
                             int fixed_pp, int fixed_cp_all_gather, int keep,
                             bool low_precision_ffn_only) {
  PrefillSearch out;
  double closest = INFINITY;
  for (int tp = 1; tp <= gpu.nvlink_domain; ++tp) {
    if (m.n_heads % tp != 0 || (fixed_tp > 0 && tp != fixed_tp)) continue;
    for (int cp = 1; cp <= gpus; cp *= 2) {
      if (S % cp != 0 || (fixed_cp > 0 && cp != fixed_cp)) continue;
      const long rest = gpus / (static_cast<long>(tp) * cp);
      if (rest * tp * cp != gpus || rest > m.n_layers) continue;
      const int pp = static_cast<int>(rest);
      if (fixed_pp > 0 && pp != fixed_pp) continue;
      for (int ag : {0, 1}) {
        if (fixed_cp_all_gather >= 0 && ag != fixed_cp_all_gather) continue;
        if (cp == 1 && ag == 1) continue;
        for (Precision p : precisions) {
          if (gpu.peak(p) <= 0) continue;
          ++out.considered;
          const PrefillEstimate est =
              estimate_prefill(m, gpu, S, {tp, cp, pp, ag == 1, p, low_precision_ffn_only});
          if (est.memory() > gpu.hbm_bytes) {
            ++out.too_big;
            if (est.memory() < closest) closest = est.memory(), out.closest = est;
            continue;
          }
          out.ranked.push_back(est);
        }
      }
    }
  }
  if (out.ranked.empty()) {
    if (out.considered == 0)
      throw Error(fmt::format(
          "--prefill: no tp x cp x pp uses exactly {} GPUs for {} ({} heads, {} layers, {} "
          "tokens; cp a power of two dividing the tokens) with the fixed --layout fields",
          gpus, m.name, m.n_heads, m.n_layers, S));
    const PrefillEstimate& c = out.closest;
    throw Error(fmt::format(
        "--prefill {} tokens of {} fits on no layout of {} x {}: the closest, {}, needs "
        "weights {}, KV cache {}, workspace {}, overhead {} = {} of {}; use more GPUs or "
        "--precision fp8",
        S, m.name, gpus, gpu.model, c.layout.to_string(), format_bytes(c.weights),
        format_bytes(c.kv_cache), format_bytes(c.workspace), format_bytes(c.overhead),
        format_bytes(c.memory()), format_bytes(gpu.hbm_bytes)));
  }
  std::sort(out.ranked.begin(), out.ranked.end(),
            [](const PrefillEstimate& a, const PrefillEstimate& b) {
              if (a.seconds != b.seconds) return a.seconds < b.seconds;
              return a.memory() < b.memory();
            });
  if (static_cast<int>(out.ranked.size()) > keep) out.ranked.resize(keep);
  return out;
}

std::string format_prefill_text(const ModelSpec& m, const Gpu& gpu, long gpus, int64_t S,
                                const PrefillSearch& s) {
  const PrefillEstimate& b = s.ranked.front();
  const double peak = gpu.bf16_flops > 0 ? gpu.bf16_flops : gpu.fp16_flops;
  std::string out = fmt::format(
      "trillion plan --prefill: {} tokens of {} on {} x {}\n"
      "Layout    {} ({})\n"
      "Prefill   {} to first token; {} FLOPs, {:.1f}% of the 16-bit peak\n"
      "          time: GEMMs {}, attention {}, elementwise {}, TP comm {}, CP comm {}, PP sends "
      "{}, first logits {}\n"
      "Memory    {} per GPU of {}: weights {}, KV cache {}, workspace {}, overhead {}\n",
      S, m.name, gpus, gpu.model, b.layout.to_string(),
      b.layout.cp > 1 ? (b.layout.cp_all_gather ? "K/V all-gathered before attention"
                                                : "ring pass-KV, hops behind the attention blocks")
                      : "no context parallelism",
      format_seconds(b.seconds), format_flops(b.model_flops),
      100 * b.model_flops / (static_cast<double>(gpus) * peak * b.seconds), format_seconds(b.gemm),
      format_seconds(b.attention), format_seconds(b.elementwise), format_seconds(b.tp_comm),
      format_seconds(b.cp_comm), format_seconds(b.pp_comm), format_seconds(b.head),
      format_bytes(b.memory()), format_bytes(gpu.hbm_bytes), format_bytes(b.weights),
      format_bytes(b.kv_cache), format_bytes(b.workspace), format_bytes(b.overhead));
  out += "\nThe layout (#1) and its runners-up:\n";
  for (size_t i = 0; i < s.ranked.size(); ++i)
    out += fmt::format("  {:>2}  {:<50} {:>10}  {:>9}\n", i + 1, s.ranked[i].layout.to_string(),
                       format_seconds(s.ranked[i].seconds), format_bytes(s.ranked[i].memory()));
  out += fmt::format("\nConsidered {} layouts, {} did not fit in {} per GPU.\n", s.considered,
                     s.too_big, format_bytes(gpu.hbm_bytes));
  return out;
}

}  // namespace trillion::plan
