// Helpers of `trillion plan`: reading a model TOML file (the engine's [model] table, plus
// optional MoE keys the planner understands), parsing token counts with K/M/B/T suffixes, and
// the plan's JSON form.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "plan/plan.h"

namespace trillion::cli {

// [model] vocab_size, d_model, n_layers, n_heads, n_kv_heads, ffn_hidden, seq_len,
// tied_embeddings, optional head_dim; optional MoE: n_dense_layers, n_routed_experts,
// n_shared_experts, top_k, expert_ffn. Throws trillion::Error naming the file and key.
plan::ModelSpec read_model_file(const std::string& path);

// "16777216", "16M", "15.6T", "1.5e13" -> a count; throws naming the option.
double parse_count(const std::string& text, const std::string& option);

nlohmann::json plan_to_json(const plan::Plan& p);

}  // namespace trillion::cli
