// See parameter_table.h.
#include "plan/parameter_table.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"

namespace trillion::plan {

namespace {

constexpr TensorShard kReplicated{};
constexpr TensorShard kColumn{0, ShardGroup::tp};  // output features split over tp
constexpr TensorShard kRow{1, ShardGroup::tp};     // input features split over tp
// Routed experts [E, FE, C] (gate, up) and [E, C, FE] (down): over ep, and their width over tp
// where the engine splits each expert over tp (parallel.expert_tp = tp).
constexpr TensorShard kExpertsIn{0, ShardGroup::ep, 1};
constexpr TensorShard kExpertsOut{0, ShardGroup::ep, 2};

struct Builder {
  TensorTable table;
  DType dtype;
  double init_std, resid_std;
  int unit = 0;

  void add(const std::string& name, std::vector<int64_t> shape, TensorRole role, TensorShard shard,
           TensorInit init) {
    TensorSpec s;
    s.name = name;
    s.global_shape = std::move(shape);
    s.dtype = dtype;
    s.shard = shard;
    s.init = init;
    s.role = role;
    s.unit = unit;
    s.weight_decay = init.kind == InitKind::normal;  // matrices decay; norms and biases do not
    table.add(std::move(s));
  }
  void matrix(const std::string& name, std::vector<int64_t> shape, TensorRole role,
              TensorShard shard) {
    add(name, std::move(shape), role, shard, {InitKind::normal, init_std});
  }
  // Residual-stream output projections get the scaled init.
  void output(const std::string& name, std::vector<int64_t> shape, TensorRole role,
              TensorShard shard) {
    add(name, std::move(shape), role, shard, {InitKind::normal, resid_std});
  }
  void norm(const std::string& name, int64_t width, TensorRole role = TensorRole::norm) {
    add(name, {width}, role, kReplicated, {InitKind::ones, 0});
  }
  // A block norm: RMSNorm has a weight, LayerNorm a weight and a bias.
  void block_norm(const std::string& name, int64_t width, NormKind kind,
                  TensorRole role = TensorRole::norm) {
    norm(name, width, role);
    if (kind == NormKind::kLayerNorm)
      add(name + "_bias", {width}, role, kReplicated, {InitKind::zeros, 0});
  }
  // The bias of a projection: split like its output features (column-parallel) or whole on every
  // rank (row-parallel: added once after the reduction).
  void bias(const std::string& name, int64_t width, TensorRole role, TensorShard shard) {
    add(name, {width}, role, shard.dim == 0 ? shard : kReplicated, {InitKind::zeros, 0});
  }
  // SwiGLU (gate + up + down) or GELU (up + down) matrices of width f, under `prefix`.
  void mlp(const std::string& prefix, int64_t C, int64_t f, bool swiglu, TensorRole role,
           bool biases = false) {
    if (swiglu) matrix(prefix + "w_gate", {f, C}, role, kColumn);
    matrix(prefix + "w_up", {f, C}, role, kColumn);
    output(prefix + "w_down", {C, f}, role, kRow);
    if (!biases) return;
    if (swiglu) bias(prefix + "b_gate", f, role, kColumn);
    bias(prefix + "b_up", f, role, kColumn);
    bias(prefix + "b_down", C, role, kRow);
  }
};

void check_positive(const ModelSpec& m) {
  auto positive = [&](const char* key, int64_t v) {
    if (v <= 0) throw Error(fmt::format("model '{}': {} must be positive, got {}", m.name, key, v));
  };
  positive("vocab_size", m.vocab);
  positive("d_model", m.d_model);
  positive("n_layers", m.n_layers);
  positive("n_heads", m.n_heads);
  if (!m.is_mla()) {
    positive("n_kv_heads", m.n_kv_heads);
    positive("head_dim", m.head_dim);
  }
  if (m.dense_layers() > 0) positive("ffn_hidden", m.ffn_hidden);
  if (m.is_moe()) {
    positive("expert_ffn", m.expert_ffn);
    positive("top_k", m.top_k);
  }
  if (m.position == PositionKind::kLearned)
    positive("seq_len (rows of the position table)", m.default_seq);
  if (!(m.dropout >= 0 && m.dropout < 1))
    throw Error(fmt::format("model '{}': dropout = {} must be in [0, 1)", m.name, m.dropout));
}

}  // namespace

TensorTable parameter_table(const ModelSpec& m, DType dtype) {
  check_positive(m);
  const int64_t C = m.d_model, NH = m.n_heads, V = m.vocab;
  Builder b{{}, dtype, m.init_std, m.init_std / std::sqrt(2.0 * static_cast<double>(m.n_layers))};
  const bool swiglu = m.mlp == MlpKind::kSwiGlu, biases = m.linear_biases;

  b.unit = embedding_unit();
  b.matrix("embed", {V, C}, TensorRole::embedding, kColumn);
  // GPT's learned positions: one row per position, replicated (Megatron does not split them).
  if (m.position == PositionKind::kLearned)
    b.matrix("pos_embed", {m.default_seq, C}, TensorRole::embedding, kReplicated);
  // One transformer block's tensors under prefix p: a main layer, or an MTP module's block. A MoE
  // block has three parts in this order: the dense tensors (up to the shared experts), the routing
  // bias, the routed experts; `parts` picks which to add (MTP modules add each part of every
  // module in turn, so the head's unit too is [dense | routing biases | routed experts]).
  enum Part { kDense = 1, kBias = 2, kExperts = 4 };
  auto add_block = [&](const std::string& p, bool dense, int parts) {
    const int64_t E = m.n_routed_experts, FE = m.expert_ffn;
    if (!dense && (parts & kBias) && m.router_bias) {
      // No gradient: moved by the balancing rule after each step. Stored between the dense
      // tensors and the routed experts, so ZeRO-3 can keep it out of both sharded stores.
      b.add(p + "moe.router_bias", {E}, TensorRole::router, kReplicated, {InitKind::zeros, 0});
    }
    if (!dense && (parts & kExperts)) {
      b.matrix(p + "moe.experts.w_gate", {E, FE, C}, TensorRole::routed_expert, kExpertsIn);
      b.matrix(p + "moe.experts.w_up", {E, FE, C}, TensorRole::routed_expert, kExpertsIn);
      b.output(p + "moe.experts.w_down", {E, C, FE}, TensorRole::routed_expert, kExpertsOut);
    }
    if (!(parts & kDense)) return;
    b.block_norm(p + "attn_norm", C, m.norm);
    if (m.is_mla()) {
      // DeepSeek-V2 §2.1: queries through a low-rank latent (or directly), keys and values
      // through a shared latent plus a decoupled RoPE key; each latent has its own RMSNorm.
      if (m.q_lora_rank > 0) {
        b.matrix(p + "attn.wq_a", {m.q_lora_rank, C}, TensorRole::attention, kReplicated);
        b.norm(p + "attn.q_norm", m.q_lora_rank, TensorRole::attention);
        b.matrix(p + "attn.wq_b", {NH * m.qk_dim(), m.q_lora_rank}, TensorRole::attention, kColumn);
      } else {
        b.matrix(p + "attn.wq", {NH * m.qk_dim(), C}, TensorRole::attention, kColumn);
      }
      b.matrix(p + "attn.wkv_a", {m.kv_lora_rank + m.qk_rope_dim, C}, TensorRole::attention,
               kReplicated);
      b.norm(p + "attn.kv_norm", m.kv_lora_rank, TensorRole::attention);
      b.matrix(p + "attn.wkv_b", {NH * (m.qk_nope_dim + m.v_head_dim), m.kv_lora_rank},
               TensorRole::attention, kColumn);
      b.output(p + "attn.wo", {C, NH * m.v_head_dim}, TensorRole::attention, kRow);
    } else {
      // wq, wk, wv back to back form the [QKV, C] matrix of one GEMM (per rank under tp).
      b.matrix(p + "attn.wq", {NH * m.head_dim, C}, TensorRole::attention, kColumn);
      b.matrix(p + "attn.wk", {m.n_kv_heads * m.head_dim, C}, TensorRole::attention, kColumn);
      b.matrix(p + "attn.wv", {m.n_kv_heads * m.head_dim, C}, TensorRole::attention, kColumn);
      b.output(p + "attn.wo", {C, NH * m.head_dim}, TensorRole::attention, kRow);
      if (biases) {
        b.bias(p + "attn.bq", NH * m.head_dim, TensorRole::attention, kColumn);
        b.bias(p + "attn.bk", m.n_kv_heads * m.head_dim, TensorRole::attention, kColumn);
        b.bias(p + "attn.bv", m.n_kv_heads * m.head_dim, TensorRole::attention, kColumn);
        b.bias(p + "attn.bo", C, TensorRole::attention, kRow);
      }
    }
    b.block_norm(p + "mlp_norm", C, m.norm);
    if (dense) {
      // w_gate, w_up back to back form the [2F, C] matrix of one GEMM.
      b.mlp(p + "mlp.", C, m.ffn_hidden, swiglu, TensorRole::mlp, biases);
    } else {
      b.matrix(p + "moe.router", {E, C}, TensorRole::router, kReplicated);
      if (m.n_shared_experts > 0) {
        b.mlp(p + "moe.shared.", C, m.n_shared_experts * FE, true, TensorRole::shared_expert);
      }
    }
  };
  for (int64_t l = 0; l < m.n_layers; ++l) {
    b.unit = layer_unit(l);
    const std::string p = fmt::format("layers.{}.", l);
    for (int part : {kDense, kBias, kExperts}) add_block(p, l < m.dense_layers(), part);
  }
  b.unit = head_unit(m);
  b.block_norm("final_norm", C, m.norm);
  if (!m.tied_embeddings) b.matrix("lm_head", {V, C}, TensorRole::head, kColumn);
  // Multi-token prediction (DeepSeek-V3 §2.2), in the head's unit (the modules run on the head's
  // stage): module k has enorm and hnorm [C], eh_proj [C, 2C] (columns [0, C) act on the normed
  // embedding, [C, 2C) on the normed hidden state, as the released checkpoint's eh_proj), a block
  // dense or MoE like the last layer, and its own final norm (the checkpoint's shared_head.norm).
  // A MoE module's routing bias and routed experts follow every module's dense tensors.
  const bool mtp_dense = m.n_layers - 1 < m.dense_layers();
  for (int64_t k = 0; k < m.mtp_depth; ++k) {
    const std::string p = fmt::format("mtp.{}.", k);
    b.norm(p + "enorm", C);
    b.norm(p + "hnorm", C);
    b.matrix(p + "eh_proj", {C, 2 * C}, TensorRole::other, kReplicated);
    add_block(p, mtp_dense, kDense);
    b.block_norm(p + "final_norm", C, m.norm);
  }
  for (int part : {kBias, kExperts}) {
    for (int64_t k = 0; k < m.mtp_depth; ++k) add_block(fmt::format("mtp.{}.", k), mtp_dense, part);
  }
  return std::move(b.table);
}

bool is_routing_bias(const TensorSpec& s) {
  return s.role == TensorRole::router && s.name.ends_with(".moe.router_bias");
}

}  // namespace trillion::plan
