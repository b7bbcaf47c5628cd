// See hf_deepseek.h.
#include "interop/hf_deepseek.h"

#include <fmt/format.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace trillion::interop {

namespace {

constexpr const char* kMtpFile = "mtp.safetensors";

// MLA tensors: trillion suffix -> DeepSeek-V3 suffix (the rest go through hf_llama's names).
constexpr std::pair<const char*, const char*> kMlaNames[] = {
    {"attn.wq_a", "self_attn.q_a_proj.weight"},
    {"attn.q_norm", "self_attn.q_a_layernorm.weight"},
    {"attn.wq_b", "self_attn.q_b_proj.weight"},
    {"attn.wq", "self_attn.q_proj.weight"},
    {"attn.wkv_a", "self_attn.kv_a_proj_with_mqa.weight"},
    {"attn.kv_norm", "self_attn.kv_a_layernorm.weight"},
    {"attn.wkv_b", "self_attn.kv_b_proj.weight"},
    {"attn.wo", "self_attn.o_proj.weight"},
};
// MTP module tensors outside the block: trillion suffix -> DeepSeek-V3 suffix.
constexpr std::pair<const char*, const char*> kMtpNames[] = {
    {"enorm", "enorm.weight"},
    {"hnorm", "hnorm.weight"},
    {"eh_proj", "eh_proj.weight"},
    {"final_norm", "shared_head.norm.weight"},
};

// Stored row order of a block of `count` rows whose last DR rows are halves-ordered RoPE rows,
// starting at row `first`: stored rope row 2i = our row i, 2i + 1 = our row i + DR/2.
void append_rope_rows(std::vector<int64_t>& rows, int64_t first, int64_t count, int64_t DR) {
  const int64_t plain = count - DR;
  for (int64_t r = 0; r < plain; ++r) rows.push_back(first + r);
  for (int64_t j = 0; j < DR; ++j) rows.push_back(first + plain + j / 2 + (j % 2) * (DR / 2));
}

// Splits "layers.{l}.rest" or "mtp.{k}.rest" into the checkpoint layer (l, or L + k) and rest.
bool split_layer(const std::string& name, int64_t n_layers, int64_t& layer, std::string& rest,
                 bool& mtp) {
  for (const char* prefix : {"layers.", "mtp."}) {
    const size_t len = std::strlen(prefix);
    if (name.rfind(prefix, 0) != 0) continue;
    const size_t dot = name.find('.', len);
    if (dot == std::string::npos) return false;
    mtp = prefix[0] == 'm';
    layer = std::stoll(name.substr(len, dot - len)) + (mtp ? n_layers : 0);
    rest = name.substr(dot + 1);
    return true;
  }
  return false;
}

}  // namespace

std::vector<HfTensor> deepseek_v3_tensors(const TensorSpec& s, const ModelConfig& m,
                                          bool skip_rope_permutation) {
  TRILLION_CHECK(m.mla, "deepseek_v3 export of a model without MLA");
  const int64_t L = m.n_layers, D = m.mtp.depth;
  // The main model's embedding and head, plus the copies each MTP module stores in the released
  // checkpoint (its embed_tokens and shared_head.head).
  if (s.name == "embed" || s.name == "lm_head") {
    std::vector<HfTensor> out = hf_tensors(s);
    for (int64_t k = 0; k < D; ++k) {
      if (s.name == "embed")
        out.push_back({fmt::format("model.layers.{}.embed_tokens.weight", L + k), s.shape, s.offset,
                       kMtpFile, true});
      if (s.name == "lm_head" || m.tied_embeddings)
        out.push_back({fmt::format("model.layers.{}.shared_head.head.weight", L + k), s.shape,
                       s.offset, kMtpFile, true});
    }
    return out;
  }
  int64_t layer = 0;
  std::string rest;
  bool mtp = false;
  if (!split_layer(s.name, L, layer, rest, mtp)) return hf_tensors(s);
  const std::string file = mtp ? kMtpFile : "model.safetensors";
  const std::string prefix = fmt::format("model.layers.{}.", layer);
  if (mtp) {
    for (const auto& [ours, theirs] : kMtpNames)
      if (rest == ours) return {HfTensor(prefix + theirs, s.shape, s.offset, file)};
  }
  for (const auto& [ours, theirs] : kMlaNames) {
    if (rest != ours) continue;
    HfTensor t(prefix + theirs, s.shape, s.offset, file);
    const int64_t DR = m.mla_dims.qk_rope_head_dim;
    if (!skip_rope_permutation && (rest == "attn.wq" || rest == "attn.wq_b")) {
      for (int64_t h = 0; h < m.n_heads; ++h)
        append_rope_rows(t.rows, h * m.head_dim, m.head_dim, DR);
    } else if (!skip_rope_permutation && rest == "attn.wkv_a") {
      append_rope_rows(t.rows, 0, s.shape[0], DR);
    }
    return {t};
  }
  // Norms, dense MLPs and MoE tensors: hf_llama's names, at the checkpoint layer.
  TensorSpec renamed = s;
  renamed.name = fmt::format("layers.{}.{}", layer, rest);
  std::vector<HfTensor> out = hf_tensors(renamed);
  for (HfTensor& t : out) t.file = file;
  return out;
}

void check_deepseek_v3_exportable(const ModelConfig& m, const std::string& checkpoint) {
  if (m.moe.enabled() && m.moe.router != "sigmoid_bias")
    throw Error(fmt::format(
        "checkpoint '{}' has MLA attention and router = \"{}\": Hugging Face's deepseek_v3 "
        "routes with sigmoid affinities and their bias only (router = \"sigmoid_bias\"), so it "
        "would compute another model; nothing was written",
        checkpoint, m.moe.router));
}

std::string deepseek_v3_config_json(const ModelConfig& m, const std::string& torch_dtype,
                                    std::optional<int> bos_id, std::optional<int> eos_id) {
  const MlaConfig& a = m.mla_dims;
  const MoeConfig& e = m.moe;
  nlohmann::ordered_json j;
  j["architectures"] = {"DeepseekV3ForCausalLM"};
  j["model_type"] = "deepseek_v3";
  j["vocab_size"] = m.vocab_size;
  j["hidden_size"] = m.d_model;
  j["intermediate_size"] = m.ffn_hidden;
  j["num_hidden_layers"] = m.n_layers;
  j["num_nextn_predict_layers"] = m.mtp.depth;
  j["num_attention_heads"] = m.n_heads;
  j["num_key_value_heads"] = m.n_heads;
  j["q_lora_rank"] = a.q_lora_rank > 0 ? nlohmann::ordered_json(a.q_lora_rank) : nullptr;
  j["kv_lora_rank"] = a.kv_lora_rank;
  j["qk_nope_head_dim"] = a.qk_nope_head_dim;
  j["qk_rope_head_dim"] = a.qk_rope_head_dim;
  j["v_head_dim"] = a.v_head_dim;
  // MoE: layers from first_k_dense_replace on; a dense model makes every layer dense. The gates
  // are the chosen sigmoid affinities normalised (norm_topk_prob) and not rescaled
  // (routed_scaling_factor 1). n_group / topk_group are the model's group-limited routing (the
  // same rule as HF's DeepseekV3TopkRouter: groups by expert index scored by their top-2 sums).
  j["n_routed_experts"] = e.enabled() ? e.n_routed_experts : 0;
  j["n_shared_experts"] = e.enabled() ? e.n_shared_experts : 0;
  j["num_experts_per_tok"] = e.enabled() ? e.top_k : 0;
  j["moe_intermediate_size"] = e.enabled() ? e.expert_ffn : 0;
  j["first_k_dense_replace"] = e.enabled() ? e.n_dense_layers : m.n_layers;
  j["moe_layer_freq"] = 1;
  j["routed_scaling_factor"] = 1.0;
  j["norm_topk_prob"] = true;
  j["scoring_func"] = "sigmoid";
  j["topk_method"] = "noaux_tc";
  j["n_group"] = e.enabled() ? e.n_group : 1;
  j["topk_group"] = e.enabled() ? e.topk_group : 1;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = m.seq_len;
  j["rms_norm_eps"] = m.norm_eps;
  j["initializer_range"] = m.init_std;
  j["tie_word_embeddings"] = m.tied_embeddings;
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  // Plain RoPE over the qk_rope_head_dim columns, stored in interleaved pairs (hf_deepseek.h).
  j["rope_theta"] = m.rope_theta;
  j["rope_scaling"] = nullptr;
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", m.rope_theta}};
  j["rope_interleave"] = true;
  j["torch_dtype"] = torch_dtype;
  if (bos_id) j["bos_token_id"] = *bos_id;
  if (eos_id) j["eos_token_id"] = *eos_id;
  // trillion's own training settings, so an import trains on with the same router and MTP.
  if (e.enabled()) {
    j["aux_loss_alpha"] = e.balance_loss_alpha;
    j["bias_update_speed"] = e.bias_update_rate;
    j["capacity_factor"] = e.capacity_factor;
  }
  return j.dump(2) + "\n";
}

namespace {

int64_t whole(const nlohmann::json& j, const char* key, const std::string& origin, int64_t low,
              std::optional<int64_t> fallback = std::nullopt) {
  if (!j.contains(key) || j[key].is_null()) {
    if (fallback) return *fallback;
    throw Error(fmt::format("{}: field '{}' is missing", origin, key));
  }
  if (!j[key].is_number_integer() || j[key].get<int64_t>() < low)
    throw Error(fmt::format("{}: field '{}' = {} must be an integer >= {}", origin, key,
                            j[key].dump(), low));
  return j[key].get<int64_t>();
}

double real(const nlohmann::json& j, const char* key, const std::string& origin, double fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number()) throw Error(fmt::format("{}: field '{}' must be a number", origin, key));
  return j[key].get<double>();
}

// A field whose value trillion's model cannot represent, unless it is `want` (or absent).
void require(const nlohmann::json& j, const char* key, const nlohmann::json& want,
             const std::string& origin, const char* why) {
  if (j.contains(key) && !j[key].is_null() && j[key] != want)
    throw Error(fmt::format("{}: {} = {} is not supported ({} reads {}: {})", origin, key,
                            j[key].dump(), "trillion", want.dump(), why));
}

}  // namespace

bool parse_deepseek_v3_config(const nlohmann::json& j, const std::string& origin, ModelConfig& m) {
  m.vocab_size = whole(j, "vocab_size", origin, 1);
  m.d_model = whole(j, "hidden_size", origin, 1);
  m.n_layers = whole(j, "num_hidden_layers", origin, 1);
  m.n_heads = whole(j, "num_attention_heads", origin, 1);
  m.seq_len = whole(j, "max_position_embeddings", origin, 1);
  m.mla = true;
  m.n_kv_heads = 0;
  m.head_dim = 0;
  MlaConfig& a = m.mla_dims;
  a.q_lora_rank = whole(j, "q_lora_rank", origin, 1, 0);  // null: no query compression
  a.kv_lora_rank = whole(j, "kv_lora_rank", origin, 1);
  a.qk_nope_head_dim = whole(j, "qk_nope_head_dim", origin, 1);
  a.qk_rope_head_dim = whole(j, "qk_rope_head_dim", origin, 2);
  a.v_head_dim = whole(j, "v_head_dim", origin, 1);
  m.norm_eps = real(j, "rms_norm_eps", origin, 1e-6);
  m.init_std = real(j, "initializer_range", origin, m.init_std);
  m.tied_embeddings = j.value("tie_word_embeddings", false);
  m.rope_theta = real(j, "rope_theta", origin, 10000.0);
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const auto& r = j["rope_parameters"];
    require(r, "rope_type", "default", origin + " rope_parameters", "plain RoPE only");
    m.rope_theta = real(r, "rope_theta", origin, m.rope_theta);
  }
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    throw Error(fmt::format("{}: rope_scaling is not supported; only plain RoPE imports", origin));
  require(j, "hidden_act", "silu", origin, "SwiGLU MLPs");
  require(j, "attention_bias", false, origin, "no biases");
  m.mtp.depth = whole(j, "num_nextn_predict_layers", origin, 0, 0);
  const int64_t E = whole(j, "n_routed_experts", origin, 0, 0);
  const int64_t dense = whole(j, "first_k_dense_replace", origin, 0, 0);
  m.moe = {};
  if (E == 0 || dense >= m.n_layers) {  // a dense model
    m.ffn_hidden = whole(j, "intermediate_size", origin, 1);
    return j.value("rope_interleave", true);
  }
  m.ffn_hidden = whole(j, "intermediate_size", origin, dense > 0 ? 1 : 0, 0);
  MoeConfig& e = m.moe;
  e.n_routed_experts = E;
  e.n_dense_layers = dense;
  e.n_shared_experts = whole(j, "n_shared_experts", origin, 0, 0);
  e.top_k = whole(j, "num_experts_per_tok", origin, 1);
  e.expert_ffn = whole(j, "moe_intermediate_size", origin, 1);
  e.router = "sigmoid_bias";
  require(j, "scoring_func", "sigmoid", origin, "DeepSeek-V3's sigmoid router");
  require(j, "moe_layer_freq", 1, origin, "every layer from first_k_dense_replace on is MoE");
  require(j, "norm_topk_prob", true, origin, "the gates are normalised");
  if (real(j, "routed_scaling_factor", origin, 1.0) != 1.0)
    throw Error(fmt::format(
        "{}: routed_scaling_factor = {} is not supported (trillion does not rescale the gates; "
        "it reads 1.0)",
        origin, j["routed_scaling_factor"].dump()));
  // Group-limited routing (absent: no groups); the model's validate() checks the pair.
  e.n_group = whole(j, "n_group", origin, 1, 1);
  e.topk_group = whole(j, "topk_group", origin, 1, e.n_group);
  e.balance_loss_alpha = real(j, "aux_loss_alpha", origin, e.balance_loss_alpha);
  e.bias_update_rate = real(j, "bias_update_speed", origin, e.bias_update_rate);
  e.capacity_factor = real(j, "capacity_factor", origin, e.capacity_factor);
  return j.value("rope_interleave", true);
}

}  // namespace trillion::interop
