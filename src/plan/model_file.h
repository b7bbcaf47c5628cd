// Model files: the TOML form of a ModelSpec. The catalog entries are such files
// (configs/models/*.toml, compiled in); a user's file is read the same way. `trillion plan
// --model` reads a file with any table besides [model] (an engine run config) with the engine's
// own parser instead (cli/plan_run_config.h: plan/ does not depend on train/); parse_model_toml
// itself reads only [model] and ignores other tables.
//
// [model] keys: vocab_size, d_model, n_layers, n_heads, n_kv_heads (default n_heads), head_dim
// (default d_model / n_heads), ffn_hidden, seq_len, tied_embeddings; the block's parts
// mlp = "swiglu" | "gelu", norm = "rmsnorm" | "layernorm", attention = "mha" | "gqa" | "mla"
// (an engine config's "tiled" | "materialized" is read as the kernel), attention_kernel =
// "flash" | "materialised", position = "rope" | "learned", linear_biases, dropout; MLA ranks
// q_lora_rank (0: queries without a latent), kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim,
// v_head_dim; MoE n_dense_layers, n_routed_experts, n_shared_experts, top_k, expert_ffn,
// moe_max_nodes (node-limited routing: the planner's bound on a token's node crossings), n_group
// and topk_group (group-limited routing; topk_group defaults to n_group; check_group_routing);
// planner metadata name, source, batch_tokens (the training batch), init_std. The engine's
// rope_theta, norm_eps, dtype, recompute and attention_block are accepted and do not change a
// plan.
//
// Invariants: every error names the file and the key and says what to write; dimensions obey
// the engine's bounds (check_dimension_bounds), seq_len <= 2^24, batch_tokens is a whole number
// of seq_len sequences; ffn_hidden = 4 x d_model without an explicit mlp is refused (GPT's GELU
// width read as a SwiGLU width builds a 1.5x bigger MLP).
#pragma once

#include <string>
#include <string_view>

#include "plan/model_spec.h"

namespace trillion::plan {

// The most sequences per step a plan takes (a model's batch_tokens, --batch-tokens): 2^30, half a
// million times Llama 3's 2,048, so micro-batch counts fit int.
constexpr double kMaxBatchSequences = 1073741824.0;

// `source` names the file in messages; the model's name defaults to the file's stem.
ModelSpec parse_model_toml(std::string_view text, std::string_view source);
ModelSpec read_model_file(const std::string& path);

// A catalog name or a path (anything with '/' or ending in .toml).
ModelSpec resolve_model(const std::string& name_or_path);

// The block in words, e.g. "GQA 128/8 heads (flash), SwiGLU F=53248, RMSNorm, RoPE".
std::string describe_block(const ModelSpec& m);

}  // namespace trillion::plan
