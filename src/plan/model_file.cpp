// See model_file.h.
#include "plan/model_file.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/toml_depth.h"

namespace trillion::plan {
namespace {

class Reader {
 public:
  Reader(const toml::table& t, std::string_view source) : t_(t), source_(source) {}

  int64_t integer(const char* key, int64_t fallback, bool required = false) {
    used_.insert(key);
    const toml::node* node = t_.get(key);
    if (!node) {
      if (required)
        throw Error(fmt::format("{}: [model] lacks {}; add e.g. {} = 4096", source_, key, key));
      return fallback;
    }
    auto v = node->value<int64_t>();
    if (!v || *v < 0 || node->is_floating_point())
      throw Error(fmt::format("{}: model.{} must be a non-negative integer", source_, key));
    return *v;
  }
  double number(const char* key, double fallback) {
    used_.insert(key);
    const toml::node* node = t_.get(key);
    if (!node) return fallback;
    auto v = node->value<double>();
    if (!v) throw Error(fmt::format("{}: model.{} must be a number", source_, key));
    return *v;
  }
  bool boolean(const char* key, bool fallback) {
    used_.insert(key);
    const toml::node* node = t_.get(key);
    if (!node) return fallback;
    auto v = node->value<bool>();
    if (!v) throw Error(fmt::format("{}: model.{} must be true or false", source_, key));
    return *v;
  }
  // A string key; absent: "". choices lists the accepted values for the message.
  std::string text(const char* key, const char* choices) {
    used_.insert(key);
    const toml::node* node = t_.get(key);
    if (!node) return "";
    auto v = node->value<std::string>();
    if (!v) throw Error(fmt::format("{}: model.{} must be a string: {}", source_, key, choices));
    return *v;
  }
  bool has(const char* key) const { return t_.get(key) != nullptr; }
  [[noreturn]] void bad(const char* key, const std::string& value, const char* choices) const {
    throw Error(fmt::format("{}: model.{} = \"{}\": use {}", source_, key, value, choices));
  }
  void ignore(const char* key) { used_.insert(key); }
  void reject_unknown() const {
    std::string known;
    for (const std::string& k : used_) known += (known.empty() ? "" : ", ") + k;
    for (const auto& [key, node] : t_)
      if (!used_.count(std::string(key.str())))
        throw Error(
            fmt::format("{}: unknown key model.{} (known keys: {}); an engine run config is "
                        "planned whole (with its [train] table), read by the engine's parser",
                        source_, key.str(), known));
  }

 private:
  const toml::table& t_;
  std::string source_;
  std::set<std::string> used_;
};

// A model's batch_tokens: absent (0), or a whole number of seq_len-token sequences, at most
// kMaxBatchSequences of them.
void check_batch_tokens(double tokens, int64_t seq, std::string_view source) {
  if (tokens == 0) return;
  const double seqs = tokens / static_cast<double>(seq);
  if (!std::isfinite(tokens) || seqs < 1 || seqs != std::round(seqs))
    throw Error(fmt::format(
        "{}: model.batch_tokens = {} is not a whole number of model.seq_len = {}-token "
        "sequences; write e.g. {} ({} x {}) or leave it out (the planner then takes ~16Mi "
        "tokens)",
        source, tokens, seq, std::max(1.0, std::round(seqs)) * static_cast<double>(seq),
        std::max(1.0, std::round(seqs)), seq));
  if (seqs > kMaxBatchSequences)
    throw Error(fmt::format("{}: model.batch_tokens = {} is {} sequences of {}; at most {} (2^30) "
                            "per step",
                            source, tokens, seqs, seq, kMaxBatchSequences));
}

std::string stem_of(std::string_view source) {
  return std::filesystem::path(std::string(source)).stem().string();
}

}  // namespace

ModelSpec parse_model_toml(std::string_view text, std::string_view source) {
  check_toml_key_depth(text, source);
  toml::table root;
  try {
    root = toml::parse(text, std::string(source));
  } catch (const toml::parse_error& e) {
    throw Error(fmt::format("{}: cannot read the model file: {} (line {})", source, e.description(),
                            e.source().begin.line));
  }
  const toml::table* table = root["model"].as_table();
  if (!table) throw Error(fmt::format("{}: no [model] table; see configs/models/*.toml", source));
  Reader r(*table, source);
  ModelSpec m;
  m.name = r.text("name", "a short name");
  if (m.name.empty()) m.name = stem_of(source);
  m.source = r.text("source", "where the dimensions come from");
  if (m.source.empty()) m.source = fmt::format("model file {}", source);
  m.vocab = r.integer("vocab_size", 0, true);
  m.d_model = r.integer("d_model", 0, true);
  m.n_layers = r.integer("n_layers", 0, true);
  m.n_heads = r.integer("n_heads", 0, true);
  m.default_seq = r.integer("seq_len", 0, true);
  if (m.n_heads == 0 || m.d_model == 0 || m.n_layers == 0 || m.vocab == 0 || m.default_seq == 0)
    throw Error(
        fmt::format("{}: vocab_size, d_model, n_layers, n_heads and seq_len must be > 0", source));
  m.n_kv_heads = r.integer("n_kv_heads", m.n_heads);
  m.head_dim = r.integer("head_dim", m.d_model / m.n_heads);
  m.tied_embeddings = r.boolean("tied_embeddings", false);
  m.linear_biases = r.boolean("linear_biases", false);
  m.dropout = r.number("dropout", 0.0);
  if (!(m.dropout >= 0 && m.dropout < 1))
    throw Error(fmt::format("{}: model.dropout = {} must be in [0, 1)", source, m.dropout));
  m.init_std = r.number("init_std", m.init_std);
  if (!(m.init_std > 0) || !std::isfinite(m.init_std))
    throw Error(fmt::format("{}: model.init_std = {} must be a finite number > 0", source,
                            m.init_std));
  if (m.default_seq > kMaxSeqLen)
    throw Error(fmt::format("{}: model.seq_len = {} exceeds {} (2^24), the engine's longest "
                            "sequence",
                            source, m.default_seq, kMaxSeqLen));
  m.default_batch_tokens = r.number("batch_tokens", 0.0);
  check_batch_tokens(m.default_batch_tokens, m.default_seq, source);
  for (const char* engine_only :
       {"rope_theta", "norm_eps", "dtype", "recompute", "attention_block"})
    r.ignore(engine_only);

  const std::string mlp = r.text("mlp", "\"swiglu\" or \"gelu\"");
  if (mlp == "gelu")
    m.mlp = MlpKind::kGelu;
  else if (mlp == "swiglu" || mlp.empty())
    m.mlp = MlpKind::kSwiGlu;
  else
    r.bad("mlp", mlp, "\"swiglu\" (gate, up, down) or \"gelu\" (up, down)");
  const std::string norm = r.text("norm", "\"rmsnorm\" or \"layernorm\"");
  if (norm == "layernorm")
    m.norm = NormKind::kLayerNorm;
  else if (!norm.empty() && norm != "rmsnorm")
    r.bad("norm", norm, "\"rmsnorm\" or \"layernorm\" (weight + bias)");
  const std::string position = r.text("position", "\"rope\" or \"learned\"");
  if (position == "learned")
    m.position = PositionKind::kLearned;
  else if (!position.empty() && position != "rope")
    r.bad("position", position, "\"rope\" or \"learned\" (a [seq_len, d_model] table)");
  const std::string kernel = r.text("attention_kernel", "\"flash\" or \"materialised\"");
  if (kernel == "materialised" || kernel == "materialized")
    m.attention_kernel = AttentionKernel::kMaterialised;
  else if (!kernel.empty() && kernel != "flash")
    r.bad("attention_kernel", kernel, "\"flash\" (tiled, no s x s tensor) or \"materialised\"");
  std::string attention = r.text("attention", "\"mha\", \"gqa\" or \"mla\"");
  // An engine run config names its attention kernel here.
  if (attention == "tiled") attention.clear();
  if (attention == "materialized") {
    m.attention_kernel = AttentionKernel::kMaterialised;
    attention.clear();
  }

  m.q_lora_rank = r.integer("q_lora_rank", 0);
  m.kv_lora_rank = r.integer("kv_lora_rank", 0);
  m.qk_nope_dim = r.integer("qk_nope_head_dim", 0);
  m.qk_rope_dim = r.integer("qk_rope_head_dim", 0);
  m.v_head_dim = r.integer("v_head_dim", 0);
  if (attention == "mla") {
    if (m.kv_lora_rank == 0 || m.qk_nope_dim == 0 || m.qk_rope_dim == 0 || m.v_head_dim == 0)
      throw Error(fmt::format(
          "{}: attention = \"mla\" needs kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim and "
          "v_head_dim (DeepSeek-V3: 512, 128, 64, 128; q_lora_rank 1536)",
          source));
    m.n_kv_heads = m.n_heads;
  } else if (m.kv_lora_rank > 0) {
    throw Error(fmt::format("{}: kv_lora_rank is an MLA key; add attention = \"mla\"", source));
  } else if (attention == "mha") {
    if (r.has("n_kv_heads") && m.n_kv_heads != m.n_heads)
      throw Error(
          fmt::format("{}: attention = \"mha\" has one K/V head per query head, but "
                      "n_kv_heads = {} != n_heads = {}; use attention = \"gqa\"",
                      source, m.n_kv_heads, m.n_heads));
  } else if (attention == "gqa" || attention.empty()) {
    if (m.n_kv_heads == 0 || m.n_heads % m.n_kv_heads != 0)
      throw Error(fmt::format("{}: n_kv_heads = {} must divide n_heads = {}", source, m.n_kv_heads,
                              m.n_heads));
  } else {
    r.bad("attention", attention, "\"mha\", \"gqa\" or \"mla\"");
  }

  m.n_routed_experts = r.integer("n_routed_experts", 0);
  const int64_t dense = r.integer("n_dense_layers", 0);
  const int64_t shared = r.integer("n_shared_experts", 0);
  const int64_t top_k = r.integer("top_k", 0);
  const int64_t expert_ffn = r.integer("expert_ffn", 0);
  m.moe_max_nodes = r.integer("moe_max_nodes", 0);
  const int64_t n_group = r.integer("n_group", 1);
  const int64_t topk_group = r.integer("topk_group", n_group);
  if (m.n_routed_experts > 0) {
    m.n_dense_layers = dense;
    m.n_shared_experts = shared;
    m.top_k = r.integer("top_k", 0, true);
    m.expert_ffn = r.integer("expert_ffn", 0, true);
    if (m.n_dense_layers > m.n_layers || m.top_k > m.n_routed_experts || m.top_k == 0)
      throw Error(fmt::format(
          "{}: need n_dense_layers <= n_layers and 1 <= top_k <= n_routed_experts", source));
    m.n_group = n_group;
    m.topk_group = topk_group;
    try {
      check_group_routing(m);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}", source, e.what()));
    }
  } else if (top_k > 0 || expert_ffn > 0 || shared > 0 || n_group != 1 || topk_group != 1) {
    throw Error(fmt::format("{}: MoE keys need n_routed_experts > 0", source));
  }
  m.ffn_hidden = r.integer("ffn_hidden", 0, m.dense_layers() > 0);
  m.mtp_depth = r.integer("mtp_depth", 0);
  if (m.mtp_depth < 0 || m.mtp_depth > 16)
    throw Error(fmt::format("{}: mtp_depth = {} must be in [0, 16] (DeepSeek-V3 uses 1)", source,
                            m.mtp_depth));
  if (mlp.empty() && m.ffn_hidden == 4 * m.d_model)
    throw Error(fmt::format(
        "{}: ffn_hidden = {} is 4 x d_model, GPT's GELU width; say which MLP it is: mlp = "
        "\"gelu\" (up + down, 8h^2 parameters) or mlp = \"swiglu\" (gate + up + down, 12h^2)",
        source, m.ffn_hidden));
  r.reject_unknown();
  try {
    check_dimension_bounds(m);  // the engine's bounds (ModelConfig::validate applies them too)
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", source, e.what()));
  }
  return m;
}

ModelSpec read_model_file(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw Error(fmt::format("{}: cannot open the model file (configs/models/ has examples)", path));
  std::stringstream text;
  text << in.rdbuf();
  return parse_model_toml(text.str(), path);
}

ModelSpec resolve_model(const std::string& name) {
  const bool is_file = name.find('/') != std::string::npos || name.ends_with(".toml");
  return is_file ? read_model_file(name) : find_model(name);
}

std::string describe_block(const ModelSpec& m) {
  std::string attention =
      m.is_mla() ? fmt::format("MLA {} heads (kv rank {})", m.n_heads, m.kv_lora_rank)
      : m.n_kv_heads == m.n_heads ? fmt::format("MHA {} heads", m.n_heads)
                                  : fmt::format("GQA {}/{} heads", m.n_heads, m.n_kv_heads);
  attention += m.attention_kernel == AttentionKernel::kFlash ? " (flash)" : " (materialised)";
  std::string out = fmt::format("{}, {} F={}", attention,
                                m.mlp == MlpKind::kSwiGlu ? "SwiGLU" : "GELU", m.ffn_hidden);
  if (m.is_moe())
    out += fmt::format(", MoE {}+{} experts top-{} F={}", m.n_shared_experts, m.n_routed_experts,
                       m.top_k, m.expert_ffn);
  out += m.norm == NormKind::kRmsNorm ? ", RMSNorm" : ", LayerNorm";
  out += m.position == PositionKind::kRope ? ", RoPE" : ", learned positions";
  if (m.linear_biases) out += ", biases";
  if (m.dropout > 0) out += fmt::format(", dropout {:g}", m.dropout);
  if (m.tied_embeddings) out += ", tied embeddings";
  if (m.mtp_depth > 0) out += fmt::format(", MTP depth {}", m.mtp_depth);
  return out;
}

}  // namespace trillion::plan
