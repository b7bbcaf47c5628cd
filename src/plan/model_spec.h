// The planner's description of a model: a decoder-only transformer that may use SwiGLU or GELU
// MLPs, grouped-query or multi-head latent attention (MLA) and DeepSeek-style Mixture of
// Experts, plus the named catalog (Llama 3 8B/70B/405B, GPT-3 175B, DeepSeek-V3, our moe-2t).
// From a spec come the counts the planner needs: parameters by kind (so they can be sharded by
// TP, PP, EP and ZeRO), activated parameters and model FLOPs per token.
//
// Invariants: for a dense SwiGLU/GQA spec every count equals transformer_cost's (the engine's)
// exactly; FLOPs count matrix multiplies only (norms, embedding lookups and softmax excluded).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/transformer_cost.h"

namespace trillion::plan {

struct ModelSpec {
  std::string name;
  std::string source;  // where the dimensions come from
  int64_t vocab = 0, d_model = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int64_t ffn_hidden = 0;  // dense layers' MLP width
  int mlp_matrices = 3;    // 3 for SwiGLU, 2 for a GELU MLP (GPT-3)
  bool tied_embeddings = false;
  // Mixture of Experts (DeepSeek-V3 2412.19437 §2.1.2): the first n_dense_layers are dense,
  // the rest have n_shared always-on experts and top_k of n_routed routed experts.
  int64_t n_dense_layers = -1;  // -1: all layers dense
  int64_t n_routed_experts = 0, n_shared_experts = 0, top_k = 0, expert_ffn = 0;
  // Multi-head latent attention (DeepSeek-V2/V3); kv_lora_rank == 0 means ordinary GQA.
  int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope_dim = 0, qk_rope_dim = 0, v_head_dim = 0;
  int64_t default_seq = 4096;
  double default_batch_tokens = 0;  // tokens per step the model was trained with (0: unknown)

  bool is_moe() const { return n_routed_experts > 0; }
  bool is_mla() const { return kv_lora_rank > 0; }
  int64_t dense_layers() const { return is_moe() ? n_dense_layers : n_layers; }
  int64_t moe_layers() const { return n_layers - dense_layers(); }
  int64_t qk_dim() const { return is_mla() ? qk_nope_dim + qk_rope_dim : head_dim; }
  int64_t v_dim() const { return is_mla() ? v_head_dim : head_dim; }
};

// Parameter counts by where they live (each a count of parameters, not bytes).
struct ModelCounts {
  int64_t attention = 0;     // one layer's attention matrices (+ its norms)
  int64_t dense_mlp = 0;     // one dense layer's MLP
  int64_t norms = 0;         // one layer's RMSNorm weights
  int64_t expert = 0;        // one routed or shared expert
  int64_t router = 0;        // one MoE layer's gate
  int64_t embedding = 0;     // V*C
  int64_t head = 0;          // V*C unless tied, + final norm
  int64_t dense_total = 0;   // everything that is not a routed expert
  int64_t routed_total = 0;  // all routed experts of all layers
  int64_t total = 0;
  int64_t activated = 0;      // per token: dense_total + top_k routed experts per MoE layer
  int64_t matmul_active = 0;  // weights that multiply per token (activated minus embedding, norms)
};

ModelCounts count_model(const ModelSpec& m);

// Training FLOPs per token (forward + backward, PaLM 2204.02311 App. B): 6 * matmul_active plus
// attention scores 6 * L * NH * (d_qk + d_v) * T * f, where f = 1 counts the full T x T matrix
// (PaLM's 12 L h T) and f = 1/2 only the causal half that FlashAttention computes.
double model_flops_per_token(const ModelSpec& m, int64_t seq_len, bool causal);
// Attention-score FLOPs alone per token and layer (same conventions).
double attention_flops_per_token_layer(const ModelSpec& m, int64_t seq_len, bool causal);

// Dense SwiGLU/GQA shape for transformer_cost (throws for MoE, MLA or GELU specs), and back:
// the engine's model config as a planner spec (so its tests can ask the memory model, e.g.
// block_terms(model_spec_from_dense(shape, T), false, 4.0) for fp32 activations).
DenseShape dense_shape(const ModelSpec& m);
ModelSpec model_spec_from_dense(const DenseShape& shape, int64_t seq_len);

// Catalog: llama3-8b, llama3-70b, llama3-405b, gpt3-175b, deepseek-v3, moe-2t. Unknown names
// throw listing the catalog.
const ModelSpec& find_model(const std::string& name);
const std::vector<ModelSpec>& model_catalog();

// Chinchilla compute-optimal tokens (Hoffmann et al. 2203.15556, Table 3): 20.2 tokens per
// parameter at 1B rising to 21.2 at 1T, i.e. D = 20.2e9 * (N / 1e9)^1.00706.
double chinchilla_tokens(double params);

}  // namespace trillion::plan
