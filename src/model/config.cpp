// See config.h.
#include "model/config.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"

namespace trillion {

void ModelConfig::validate() {
  auto positive = [](const char* key, int64_t v) {
    if (v <= 0) throw Error(fmt::format("model.{} must be positive, got {}", key, v));
  };
  positive("vocab_size", vocab_size);
  positive("d_model", d_model);
  positive("n_layers", n_layers);
  positive("n_heads", n_heads);
  positive("ffn_hidden", ffn_hidden);
  positive("seq_len", seq_len);
  if (mla) validate_mla();
  if (n_kv_heads == 0) n_kv_heads = n_heads;
  positive("n_kv_heads", n_kv_heads);
  if (head_dim == 0) {
    if (d_model % n_heads != 0) {
      throw Error(fmt::format(
          "model.n_heads = {} does not divide model.d_model = {}; choose n_heads dividing "
          "d_model or set model.head_dim explicitly",
          n_heads, d_model));
    }
    head_dim = d_model / n_heads;
  }
  positive("head_dim", head_dim);
  if (head_dim % 2 != 0) {
    throw Error(fmt::format("model.head_dim = {} must be even for rotary embeddings", head_dim));
  }
  if (n_heads % n_kv_heads != 0) {
    throw Error(fmt::format(
        "model.n_kv_heads = {} must divide model.n_heads = {} (grouped-query attention)",
        n_kv_heads, n_heads));
  }
  // Bounds far above any published model, shared with the planner's model files.
  plan::check_dimension_bounds(spec());
  if (!(rope_theta > 0))
    throw Error(fmt::format("model.rope_theta must be > 0, got {}", rope_theta));
  if (!(norm_eps > 0)) throw Error(fmt::format("model.norm_eps must be > 0, got {}", norm_eps));
  if (!(init_std > 0)) throw Error(fmt::format("model.init_std must be > 0, got {}", init_std));
  if (attention_block < 0) {
    throw Error(fmt::format("model.attention_block = {} must be >= 0 (0: from the cache size)",
                            attention_block));
  }
  if (moe.enabled()) {
    auto nonnegative = [](const char* key, int64_t v) {
      if (v < 0) throw Error(fmt::format("model.{} must be >= 0, got {}", key, v));
    };
    nonnegative("n_dense_layers", moe.n_dense_layers);
    nonnegative("n_shared_experts", moe.n_shared_experts);
    positive("top_k", moe.top_k);
    positive("expert_ffn", moe.expert_ffn);
    if (moe.top_k > moe.n_routed_experts) {
      throw Error(fmt::format("model.top_k = {} exceeds model.n_routed_experts = {}", moe.top_k,
                              moe.n_routed_experts));
    }
    if (moe.n_dense_layers > n_layers) {
      throw Error(fmt::format("model.n_dense_layers = {} exceeds model.n_layers = {}",
                              moe.n_dense_layers, n_layers));
    }
    if (moe.router != "sigmoid_bias" && moe.router != "softmax_aux") {
      throw Error(
          fmt::format("model.router = '{}': expected sigmoid_bias or softmax_aux", moe.router));
    }
    plan::check_group_routing(spec());
    if (!(moe.bias_update_rate >= 0) || !(moe.balance_loss_alpha >= 0) ||
        !(moe.capacity_factor >= 0)) {
      throw Error(
          "model.bias_update_rate, balance_loss_alpha and capacity_factor must be >= 0 and finite");
    }
  } else if (moe.n_routed_experts < 0) {
    throw Error(fmt::format("model.n_routed_experts must be >= 0, got {}", moe.n_routed_experts));
  }
  validate_mtp();
  if (dtype != DType::f32 && dtype != DType::f64) {
    throw Error(
        fmt::format("model.dtype = {}: the CPU engine computes in f32 or f64", dtype_name(dtype)));
  }
}

void ModelConfig::validate_mtp() const {
  if (mtp.depth < 0 || mtp.depth > 16) {
    throw Error(fmt::format(
        "model.mtp_depth = {} must be in [0, 16] (0: no multi-token prediction; DeepSeek-V3 "
        "uses 1)",
        mtp.depth));
  }
  if (!(mtp.loss_weight >= 0) || !std::isfinite(mtp.loss_weight)) {
    throw Error(
        fmt::format("model.mtp_loss_weight = {} must be a finite number >= 0 (DeepSeek-V3: "
                    "0.3, then 0.1)",
                    mtp.loss_weight));
  }
  const bool after = mtp.loss_weight_after >= 0;
  if (!std::isfinite(mtp.loss_weight_after) ||
      (mtp.loss_weight_after < 0 && mtp.loss_weight_after != -1)) {
    throw Error(fmt::format("model.mtp_loss_weight_after = {} must be a finite number >= 0",
                            mtp.loss_weight_after));
  }
  if (after != (mtp.switch_step > 0)) {
    throw Error(fmt::format(
        "model.mtp_loss_weight_after ({}) and model.mtp_loss_weight_switch_step ({}) go "
        "together: set both (the weight from that step on, a step >= 1) or neither",
        after ? fmt::format("{}", mtp.loss_weight_after) : std::string("unset"), mtp.switch_step));
  }
  if (mtp.switch_step < 0) {
    throw Error(
        fmt::format("model.mtp_loss_weight_switch_step = {} must be >= 1", mtp.switch_step));
  }
  if (mtp.enabled() && mtp.depth >= seq_len) {
    throw Error(fmt::format(
        "model.mtp_depth = {} leaves no position with a target in a sequence of model.seq_len = "
        "{}; use mtp_depth < seq_len",
        mtp.depth, seq_len));
  }
}

void ModelConfig::validate_mla() {
  const MlaConfig& d = mla_dims;
  auto at_least = [](const char* key, int64_t v, int64_t low) {
    if (v < low) {
      throw Error(
          fmt::format("model.{} = {} must be >= {} with attention = \"mla\" (DeepSeek-V3: "
                      "q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim 128, "
                      "qk_rope_head_dim 64, v_head_dim 128)",
                      key, v, low));
    }
  };
  at_least("q_lora_rank", d.q_lora_rank, 0);
  at_least("kv_lora_rank", d.kv_lora_rank, 1);
  at_least("qk_nope_head_dim", d.qk_nope_head_dim, 1);
  at_least("qk_rope_head_dim", d.qk_rope_head_dim, 2);
  at_least("v_head_dim", d.v_head_dim, 1);
  if (d.qk_rope_head_dim % 2 != 0) {
    throw Error(fmt::format("model.qk_rope_head_dim = {} must be even for rotary embeddings",
                            d.qk_rope_head_dim));
  }
  // Every head has its own key and value (from the shared latent): n_kv_heads = n_heads, and
  // the query/key head is qk_nope + qk_rope wide. Either may be written out (a resolved config
  // does) but must then agree.
  const int64_t qk = d.qk_nope_head_dim + d.qk_rope_head_dim;
  if (head_dim != 0 && head_dim != qk) {
    throw Error(fmt::format(
        "model.head_dim = {} with attention = \"mla\": the query/key head dim is qk_nope_head_dim "
        "+ qk_rope_head_dim = {}; remove head_dim",
        head_dim, qk));
  }
  if (n_kv_heads != 0 && n_kv_heads != n_heads) {
    throw Error(fmt::format(
        "model.n_kv_heads = {} with attention = \"mla\": every head has its own key and value "
        "(n_kv_heads = n_heads = {}); remove n_kv_heads",
        n_kv_heads, n_heads));
  }
  head_dim = qk;
  n_kv_heads = n_heads;
}

void ModelConfig::set_recompute(const std::string& text) {
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  recompute_every = 1;
  recompute_norm_up = text == "norm-up";
  if (recompute_norm_up) {
    recompute = plan::Recompute::kNone;
    return;
  }
  if (colon != std::string::npos) {
    int64_t k = 0;
    try {
      size_t used = 0;
      k = std::stoll(text.substr(colon + 1), &used);
      if (used != text.size() - colon - 1) k = 0;
    } catch (const std::exception&) {
      k = 0;
    }
    if (kind != "full" || k < 1) {
      throw Error(
          fmt::format("model.recompute = '{}': expected none, selective, full or full:K "
                      "with K >= 1 (full recompute of every K-th layer)",
                      text));
    }
    recompute_every = k;
  }
  if (kind == "none") {
    recompute = plan::Recompute::kNone;
  } else if (kind == "selective") {
    recompute = plan::Recompute::kSelective;
  } else if (kind == "full") {
    recompute = plan::Recompute::kFull;
  } else {
    throw Error(fmt::format(
        "model.recompute = '{}': expected none, selective, full, full:K or norm-up", text));
  }
}

std::string ModelConfig::recompute_string() const {
  if (recompute_norm_up) return "norm-up";
  switch (recompute) {
    case plan::Recompute::kNone:
      return "none";
    case plan::Recompute::kSelective:
      return "selective";
    case plan::Recompute::kFull:
      return recompute_every == 1 ? "full" : fmt::format("full:{}", recompute_every);
  }
  return "none";
}

plan::ModelSpec ModelConfig::spec() const {
  plan::ModelSpec s;
  s.name = "model";
  s.source = "run config [model]";
  s.vocab = vocab_size;
  s.d_model = d_model;
  s.n_layers = n_layers;
  s.n_heads = n_heads;
  s.n_kv_heads = n_kv_heads;
  s.head_dim = head_dim;
  s.ffn_hidden = ffn_hidden;
  s.tied_embeddings = tied_embeddings;
  s.default_seq = seq_len;
  s.init_std = init_std;
  s.mtp_depth = mtp.depth;
  if (mla) {
    s.q_lora_rank = mla_dims.q_lora_rank;
    s.kv_lora_rank = mla_dims.kv_lora_rank;
    s.qk_nope_dim = mla_dims.qk_nope_head_dim;
    s.qk_rope_dim = mla_dims.qk_rope_head_dim;
    s.v_head_dim = mla_dims.v_head_dim;
  }
  if (moe.enabled()) {
    s.n_dense_layers = moe.n_dense_layers;
    s.n_routed_experts = moe.n_routed_experts;
    s.n_shared_experts = moe.n_shared_experts;
    s.top_k = moe.top_k;
    s.expert_ffn = moe.expert_ffn;
    s.router_bias = moe.router == "sigmoid_bias";
    s.n_group = moe.n_group;
    s.topk_group = moe.topk_group;
  }
  return s;
}

}  // namespace trillion
