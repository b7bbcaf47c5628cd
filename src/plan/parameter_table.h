// The parameter table of a model description: the one place parameters are counted. The engine
// allocates its flat buffers from this table (through ModelConfig::spec()), the planner counts
// parameters by summing it (count_model), and `trillion inspect` prints it, so the planner's
// count of any model the engine can build equals the engine's allocation exactly.
//
// Layout order and units (the granularity of stages, data parallelism and ZeRO):
//   unit 0      embed [V, C]
//   unit 1 + l  layers.{l}: attn_norm [C], attention (GQA: attn.wq [NH*HD, C], attn.wk, attn.wv
//               [KV*HD, C], attn.wo [C, NH*HD]; MLA: attn.wq_a, q_norm, wq_b, wkv_a, kv_norm,
//               wkv_b, wo), mlp_norm [C], then a dense MLP (SwiGLU: mlp.w_gate, mlp.w_up [F, C],
//               mlp.w_down [C, F]; GELU: mlp.w_up, mlp.w_down) or a MoE block (moe.router [E, C],
//               moe.shared.{w_gate, w_up, w_down} for the shared experts, moe.router_bias [E]
//               for sigmoid routing, moe.experts.{w_gate, w_up} [E, FE, C] and
//               moe.experts.w_down [E, C, FE])
//   unit L + 1  final_norm [C], lm_head [V, C] (absent when tied: the head reads embed)
//               then, for multi-token prediction, mtp.{k} for k < mtp_depth: enorm, hnorm [C],
//               eh_proj [C, 2C], a block's tensors (attn_norm ... as layers.{l}; dense or MoE
//               like the last layer), final_norm [C]; with a MoE block every module's routing
//               bias, then every module's routed experts follow (mtp.{k}.moe.router_bias,
//               mtp.{k}.moe.experts.*), so each unit is [dense | routing biases | experts]
// LayerNorm adds a bias after each norm weight (attn_norm_bias, ...); linear_biases adds attn.bq,
// bk, bv, bo and mlp.b_gate, b_up, b_down after the block's matrices (column-parallel biases split
// like their outputs, row-parallel ones replicated); biases init to zeros.
// Sharding (Megatron-LM, Shoeybi et al. 1909.08053 §3): column-parallel matrices (wq, wk, wv,
// w_gate, w_up, wq_b, wkv_b, embed and lm_head by vocabulary rows) split dimension 0 over tp,
// row-parallel ones (wo, w_down) dimension 1; routed experts split dimension 0 over ep; norms and
// the router are replicated. Init: normal(init_std), residual output projections (wo, w_down)
// normal(init_std / sqrt(2 L)) (GPT-2's scaled init), norms ones.
#pragma once

#include "core/tensor_table.h"
#include "plan/model_spec.h"

namespace trillion::plan {

inline int embedding_unit() {
  return 0;
}
inline int layer_unit(int64_t layer) {
  return 1 + static_cast<int>(layer);
}
inline int head_unit(const ModelSpec& m) {
  return 1 + static_cast<int>(m.n_layers);
}

// Throws Error naming the field when the spec cannot describe a model (non-positive sizes).
TensorTable parameter_table(const ModelSpec& m, DType dtype = DType::f32);

// An aux-loss-free routing bias (layers.{l}.moe.router_bias, and mtp.{k}.moe.router_bias of a
// MoE MTP block): no gradient, moved in place by the balancing rule after each step, so ZeRO-3
// keeps it whole on every rank, outside the sharded stores.
bool is_routing_bias(const TensorSpec& s);

}  // namespace trillion::plan
