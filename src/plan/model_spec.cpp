// See model_spec.h. Catalog dimensions are quoted from each model's paper or released config.
#include "plan/model_spec.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "plan/parameter_table.h"

namespace trillion::plan {

namespace {

ModelCounts sum_table(const ModelSpec& m) {
  const TensorTable table = parameter_table(m);
  int64_t attention = 0, layer_norms = 0, mlp = 0, router = 0, routed = 0, embedding = 0;
  int64_t head = 0, matmul_dense = 0;
  for (const TensorSpec& s : table.specs()) {
    const int64_t n = s.global_numel();
    switch (s.role) {
      case TensorRole::attention:
        attention += n;
        break;
      case TensorRole::norm:
        if (s.unit != head_unit(m)) layer_norms += n;
        break;
      case TensorRole::mlp:
        mlp += n;
        break;
      case TensorRole::router:
        router += n;
        break;
      case TensorRole::routed_expert:
        routed += n;
        break;
      case TensorRole::embedding:
        embedding += n;
        break;
      default:
        break;
    }
    if (s.unit == head_unit(m)) head += n;
    // Matrices multiply every token; vectors (norms) and the embedding lookup do not.
    const bool matrix = s.global_shape.size() >= 2;
    if (matrix && s.role != TensorRole::embedding && s.role != TensorRole::routed_expert) {
      matmul_dense += n;
    }
  }
  ModelCounts c;
  c.attention = attention / m.n_layers;
  c.norms = layer_norms / m.n_layers;
  c.dense_mlp = m.dense_layers() > 0 ? mlp / m.dense_layers() : 0;
  c.router = m.moe_layers() > 0 ? router / m.moe_layers() : 0;
  c.expert = m.moe_layers() > 0 ? routed / (m.moe_layers() * m.n_routed_experts) : 0;
  c.embedding = embedding;
  c.head = head;
  c.routed_total = routed;
  c.total = table.total_elements();
  c.dense_total = c.total - c.routed_total;
  const int64_t active_experts = m.moe_layers() * m.top_k * c.expert;
  c.activated = c.dense_total + active_experts;
  // A tied head still multiplies: the embedding matrix is used once more as the output layer.
  c.matmul_active = matmul_dense + active_experts + (m.tied_embeddings ? m.vocab * m.d_model : 0);
  return c;
}

}  // namespace

ModelCounts count_model(const ModelSpec& m) {
  // The planner's search asks for the same model's counts many times: keep the last answer.
  thread_local ModelSpec last;
  thread_local ModelCounts counts;
  thread_local bool valid = false;
  if (!valid || !(last == m)) {
    counts = sum_table(m);
    last = m;
    valid = true;
  }
  return counts;
}

std::string_view attention_flops_name(AttentionFlops a) {
  return a == AttentionFlops::kCausal ? "causal" : "full_square";
}

AttentionFlops parse_attention_flops(std::string_view name) {
  if (name == "causal") return AttentionFlops::kCausal;
  if (name == "full_square" || name == "full") return AttentionFlops::kFullSquare;
  throw Error(fmt::format("attention FLOPs convention '{}': use causal or full_square", name));
}

double attention_flops_per_token_layer(const ModelSpec& m, int64_t seq_len, AttentionFlops a) {
  return 6.0 * m.n_heads * (m.qk_dim() + m.v_dim()) * seq_len *
         (a == AttentionFlops::kCausal ? 0.5 : 1.0);
}

double model_flops_per_token(const ModelSpec& m, int64_t seq_len, AttentionFlops a) {
  return 6.0 * static_cast<double>(count_model(m).matmul_active) +
         static_cast<double>(m.n_layers) * attention_flops_per_token_layer(m, seq_len, a);
}

void require_engine_block(const ModelSpec& m) {
  if (m.is_moe() || m.is_mla() || m.mlp_matrices != 3)
    throw Error(fmt::format("model '{}' is not a dense SwiGLU/GQA model", m.name));
}

namespace {

ModelSpec llama(std::string name, int64_t C, int64_t L, int64_t NH, int64_t F) {
  ModelSpec m;
  m.name = std::move(name);
  m.source = "Llama 3 (Grattafiori et al. 2407.21783, Table 3)";
  m.vocab = 128256;
  m.d_model = C;
  m.n_layers = L;
  m.n_heads = NH;
  m.n_kv_heads = 8;
  m.head_dim = C / NH;
  m.ffn_hidden = F;
  m.default_seq = 8192;
  m.default_batch_tokens = 16.0 * 1024 * 1024;  // 2048 sequences of 8192 (Table 4)
  return m;
}

std::vector<ModelSpec> build_catalog() {
  std::vector<ModelSpec> out;
  out.push_back(llama("llama3-8b", 4096, 32, 32, 14336));
  out.push_back(llama("llama3-70b", 8192, 80, 64, 28672));
  out.push_back(llama("llama3-405b", 16384, 126, 128, 53248));
  ModelSpec gpt3;  // Brown et al. 2005.14165 Table 2.1: GELU MLP of 4h, tied embeddings
  gpt3.name = "gpt3-175b";
  gpt3.source = "GPT-3 (Brown et al. 2005.14165, Table 2.1)";
  gpt3.vocab = 50257;
  gpt3.d_model = 12288;
  gpt3.n_layers = 96;
  gpt3.n_heads = gpt3.n_kv_heads = 96;
  gpt3.head_dim = 128;
  gpt3.ffn_hidden = 4 * 12288;
  gpt3.mlp_matrices = 2;
  gpt3.tied_embeddings = true;
  gpt3.default_seq = 2048;
  gpt3.default_batch_tokens = 1536.0 * 2048;  // 3.2M tokens (Table 2.1)
  out.push_back(gpt3);
  ModelSpec ds;  // DeepSeek-V3 2412.19437 §4.2 and its released config (MTP module excluded)
  ds.name = "deepseek-v3";
  ds.source = "DeepSeek-V3 (2412.19437 §4.2): 671B total, 37B activated";
  ds.vocab = 129280;
  ds.d_model = 7168;
  ds.n_layers = 61;
  ds.n_heads = ds.n_kv_heads = 128;
  ds.head_dim = 128;
  ds.ffn_hidden = 18432;
  ds.n_dense_layers = 3;
  ds.n_routed_experts = 256;
  ds.n_shared_experts = 1;
  ds.top_k = 8;
  ds.expert_ffn = 2048;
  ds.q_lora_rank = 1536;
  ds.kv_lora_rank = 512;
  ds.qk_nope_dim = 128;
  ds.qk_rope_dim = 64;
  ds.v_head_dim = 128;
  ds.default_seq = 4096;
  ds.default_batch_tokens = 15360.0 * 4096;  // final batch of 15,360 sequences (§4.2)
  out.push_back(ds);
  // Our 2T design: DeepSeek-V3's recipe (1 shared + 256 routed, top-8, first layers dense)
  // scaled to 96 layers of width 8192 with GQA (64 heads, 8 KV heads), expert width 3328:
  // 1.99T total, 86B activated per token.
  ModelSpec big;
  big.name = "moe-2t";
  big.source = "trillion's own 2T MoE design (DeepSeek-V3 recipe scaled up)";
  big.vocab = 128256;
  big.d_model = 8192;
  big.n_layers = 96;
  big.n_heads = 64;
  big.n_kv_heads = 8;
  big.head_dim = 128;
  big.ffn_hidden = 28672;
  big.n_dense_layers = 2;
  big.n_routed_experts = 256;
  big.n_shared_experts = 1;
  big.top_k = 8;
  big.expert_ffn = 3328;
  big.default_seq = 4096;
  big.default_batch_tokens = 16384.0 * 4096;  // 64M tokens, DeepSeek-V3's batch scale
  out.push_back(big);
  return out;
}

}  // namespace

const std::vector<ModelSpec>& model_catalog() {
  static const std::vector<ModelSpec> catalog = build_catalog();
  return catalog;
}

const ModelSpec& find_model(const std::string& name) {
  std::string names;
  for (const ModelSpec& m : model_catalog()) {
    if (m.name == name) return m;
    names += (names.empty() ? "" : ", ") + m.name;
  }
  throw Error(fmt::format("unknown model '{}': use one of {} or a model TOML file", name, names));
}

double chinchilla_tokens(double params) {
  return 20.2e9 * std::pow(params / 1e9, 1.00706);
}

}  // namespace trillion::plan
