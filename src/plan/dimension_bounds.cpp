// check_dimension_bounds and check_group_routing (plan/model_spec.h), in a file of their own: the
// engine's run-config reader calls them, and readers built alone (the fuzz targets) link them
// without the planner.
#include <fmt/format.h>

#include "core/error.h"
#include "plan/model_spec.h"

namespace trillion::plan {

void check_dimension_bounds(const ModelSpec& m) {
  auto at_most = [](const char* key, int64_t v, int log2) {
    if (v > (int64_t{1} << log2))
      throw Error(fmt::format(
          "model.{} = {} exceeds 2^{}, larger than any model this engine can hold in memory", key,
          v, log2));
  };
  at_most("d_model", m.d_model, 16);
  at_most("n_layers", m.n_layers, 14);
  at_most("n_heads", m.n_heads, 14);
  at_most("head_dim", m.head_dim, 12);
  at_most("ffn_hidden", m.ffn_hidden, 19);
  at_most("n_routed_experts", m.n_routed_experts, 12);
  at_most("n_shared_experts", m.n_shared_experts, 6);
  at_most("expert_ffn", m.expert_ffn, 17);
  // MLA's ranks and head widths (planner only: the engine has no MLA) as d_model and head_dim.
  at_most("q_lora_rank", m.q_lora_rank, 16);
  at_most("kv_lora_rank", m.kv_lora_rank, 16);
  at_most("qk_nope_head_dim", m.qk_nope_dim, 12);
  at_most("qk_rope_head_dim", m.qk_rope_dim, 12);
  at_most("v_head_dim", m.v_head_dim, 12);
  if (m.vocab > (int64_t{1} << 31) - 1)
    throw Error(fmt::format("model.vocab_size = {} exceeds 2^31 - 1", m.vocab));
}

void check_group_routing(const ModelSpec& m) {
  const int64_t E = m.n_routed_experts, G = m.n_group;
  if (G < 1 || (E > 0 && E % G != 0))
    throw Error(fmt::format(
        "model.n_group = {} must be >= 1 and divide model.n_routed_experts = {} (the experts are "
        "n_group contiguous groups of equal size)",
        G, E));
  if (m.topk_group < 1 || m.topk_group > G)
    throw Error(
        fmt::format("model.topk_group = {} must be in [1, model.n_group = {}]", m.topk_group, G));
  if (G == 1 || E == 0) return;
  if (E / G < 2)
    throw Error(fmt::format(
        "model.n_group = {} makes groups of 1 expert; a group is scored by the sum of its top 2 "
        "experts (DeepSeek-V3), so each needs >= 2 (use n_group <= {})",
        G, E / 2));
  if (m.topk_group * (E / G) < m.top_k)
    throw Error(fmt::format(
        "model.topk_group = {} keeps {} experts ({} groups of {}), fewer than model.top_k = {}",
        m.topk_group, m.topk_group * (E / G), m.topk_group, E / G, m.top_k));
  if (!m.router_bias)
    throw Error(fmt::format(
        "model.n_group = {}: group-limited routing is DeepSeek-V3's sigmoid router's rule; use "
        "router = \"sigmoid_bias\" or n_group = 1 (softmax_aux routes without groups)",
        G));
}

}  // namespace trillion::plan
