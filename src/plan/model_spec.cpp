// See model_spec.h. Catalog dimensions live in configs/models/*.toml, each citing its source.
#include "plan/model_spec.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "plan/catalog_files.h"
#include "plan/model_file.h"
#include "plan/parameter_table.h"

namespace trillion::plan {

namespace {

ModelCounts sum_table(const ModelSpec& m) {
  const TensorTable table = parameter_table(m);
  int64_t attention = 0, layer_norms = 0, mlp = 0, router = 0, routed = 0, embedding = 0;
  int64_t head = 0, matmul_dense = 0;
  int64_t mtp = 0, mtp_matmul = 0, mtp_routed = 0;
  for (const TensorSpec& s : table.specs()) {
    const int64_t n = s.global_numel();
    if (s.name.starts_with("mtp.")) {  // counted apart, so the per-layer counts stay per layer
      mtp += n;
      if (s.role == TensorRole::routed_expert) {
        mtp_routed += n;
      } else if (s.global_shape.size() >= 2) {
        mtp_matmul += n;
      }
      continue;
    }
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
  c.routed_total = routed + mtp_routed;
  c.total = table.total_elements();
  c.dense_total = c.total - c.routed_total;
  c.mtp = mtp;
  // An MTP module's block is MoE when the last layer is; each module multiplies its tokens by
  // the shared output head once more.
  const bool mtp_moe = m.moe_layers() > 0;
  const int64_t active_experts =
      (m.moe_layers() + (mtp_moe ? m.mtp_depth : 0)) * m.top_k * c.expert;
  c.activated = c.dense_total + active_experts;
  // A tied head still multiplies: the embedding matrix is used once more as the output layer.
  c.matmul_active = matmul_dense + mtp_matmul + active_experts +
                    (m.tied_embeddings ? m.vocab * m.d_model : 0) +
                    m.mtp_depth * m.vocab * m.d_model;
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
         static_cast<double>(m.n_layers + m.mtp_depth) *
             attention_flops_per_token_layer(m, seq_len, a);
}

void require_engine_block(const ModelSpec& m) {
  if (m.is_moe() || m.mlp != MlpKind::kSwiGlu || m.norm != NormKind::kRmsNorm ||
      m.position != PositionKind::kRope || m.linear_biases || m.dropout > 0)
    throw Error(fmt::format(
        "model '{}' ({} MLP, {}, {} attention, {} positions{}{}) is not the engine's block "
        "(dense SwiGLU, RMSNorm, GQA or MLA, RoPE, no biases, no dropout)",
        m.name, mlp_kind_name(m.mlp), norm_kind_name(m.norm), m.attention_kind(),
        position_kind_name(m.position), m.linear_biases ? ", biases" : "",
        m.dropout > 0 ? ", dropout" : ""));
}

std::string_view mlp_kind_name(MlpKind k) {
  return k == MlpKind::kSwiGlu ? "swiglu" : "gelu";
}
std::string_view norm_kind_name(NormKind k) {
  return k == NormKind::kRmsNorm ? "rmsnorm" : "layernorm";
}
std::string_view position_kind_name(PositionKind k) {
  return k == PositionKind::kRope ? "rope" : "learned";
}
std::string_view attention_kernel_name(AttentionKernel k) {
  return k == AttentionKernel::kFlash ? "flash" : "materialised";
}

const std::vector<ModelSpec>& model_catalog() {
  static const std::vector<ModelSpec> catalog = [] {
    std::vector<ModelSpec> out;
    for (const CatalogFile& f : catalog_files())
      if (f.path.starts_with("models/")) out.push_back(parse_model_toml(f.text, f.path));
    return out;
  }();
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
