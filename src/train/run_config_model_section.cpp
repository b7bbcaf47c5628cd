// See section_reader.h: the [model] section of a run config.
#include <fmt/format.h>

#include <string>

#include "core/error.h"
#include "train/section_reader.h"

namespace trillion::config_reading {

namespace {

// Model fields whose bad values ModelConfig::validate() lets through but that can only give
// NaN or a run that learns nothing (kept here: model/config.cpp is shared with the planner's
// model files, which have their own checks).
void validate_model_numerics(const ModelConfig& mc, const std::string& source) {
  finite(source, "model.rope_theta", mc.rope_theta);
  finite(source, "model.norm_eps", mc.norm_eps);
  finite(source, "model.init_std", mc.init_std);
  if (mc.vocab_size < 2) {
    throw Error(
        fmt::format("{}: model.vocab_size = {} must be >= 2 (with one token the loss is "
                    "0 and nothing is learned)",
                    source, mc.vocab_size));
  }
  if (mc.recompute == plan::Recompute::kFull && mc.recompute_every > mc.n_layers) {
    throw Error(
        fmt::format("{}: model.recompute = '{}' recomputes every {}th layer but the model "
                    "has {} layers; use full:K with K <= {}",
                    source, mc.recompute_string(), mc.recompute_every, mc.n_layers, mc.n_layers));
  }
  constexpr int64_t kMaxSeqLen = int64_t{1} << 24;  // the data loader indexes windows with int
  if (mc.seq_len > kMaxSeqLen) {
    throw Error(
        fmt::format("{}: model.seq_len = {} exceeds {} (2^24)", source, mc.seq_len, kMaxSeqLen));
  }
}

// The MLA keys (model/config.h MlaConfig); true if any is given.
bool read_mla_keys(SectionReader& m, MlaConfig& d) {
  bool any = false;
  any |= m.read("q_lora_rank", d.q_lora_rank);
  any |= m.read("kv_lora_rank", d.kv_lora_rank);
  any |= m.read("qk_nope_head_dim", d.qk_nope_head_dim);
  any |= m.read("qk_rope_head_dim", d.qk_rope_head_dim);
  any |= m.read("v_head_dim", d.v_head_dim);
  return any;
}

// model.attention chooses the module: "gqa" (also "mha") or "mla"; model.attention_kernel the
// core both use: "tiled" or "materialized". The legacy values attention = "tiled" |
// "materialized" mean GQA with that core.
void set_attention(const std::string& source, const std::string& attention,
                   const std::string& kernel, bool kernel_given, bool mla_given, ModelConfig& mc) {
  std::string core = kernel;
  if (attention == "tiled" || attention == "materialized") {
    if (kernel_given && kernel != attention) {
      throw Error(fmt::format(
          "{}: model.attention = '{}' (the old spelling of attention_kernel) contradicts "
          "model.attention_kernel = '{}'; write attention = \"gqa\" and attention_kernel only",
          source, attention, kernel));
    }
    core = attention;
    mc.mla = false;
  } else if (attention == "gqa" || attention == "mha" || attention == "mla") {
    mc.mla = attention == "mla";
  } else {
    throw Error(fmt::format(
        "{}: model.attention = '{}': expected gqa (grouped-query attention) or mla (multi-head "
        "latent attention); the core is model.attention_kernel = tiled | materialized",
        source, attention));
  }
  if (core != "tiled" && core != "materialized") {
    throw Error(fmt::format("{}: model.attention_kernel = '{}': expected tiled or materialized",
                            source, core));
  }
  mc.tiled_attention = core == "tiled";
  if (mla_given && !mc.mla) {
    throw Error(fmt::format(
        "{}: model.kv_lora_rank, q_lora_rank, qk_nope_head_dim, qk_rope_head_dim and v_head_dim "
        "are multi-head latent attention keys; add model.attention = \"mla\"",
        source));
  }
}

}  // namespace

void read_model_section(const toml::table& root, const std::string& source, ModelConfig& mc) {
  SectionReader m = section(root, "model", source);
  std::string dtype = std::string(dtype_name(mc.dtype));
  m.read("vocab_size", mc.vocab_size);
  m.read("d_model", mc.d_model);
  m.read("n_layers", mc.n_layers);
  m.read("n_heads", mc.n_heads);
  m.read("n_kv_heads", mc.n_kv_heads);
  m.read("head_dim", mc.head_dim);
  m.read("ffn_hidden", mc.ffn_hidden);
  m.read("seq_len", mc.seq_len);
  m.read("tied_embeddings", mc.tied_embeddings);
  m.read("rope_theta", mc.rope_theta);
  m.read("norm_eps", mc.norm_eps);
  m.read("init_std", mc.init_std);
  m.read("dtype", dtype);
  std::string recompute = mc.recompute_string();
  std::string attention = mc.mla ? "mla" : "gqa";
  std::string kernel = mc.tiled_attention ? "tiled" : "materialized";
  m.read("recompute", recompute);
  m.read("attention", attention);
  const bool kernel_given = m.read("attention_kernel", kernel);
  m.read("attention_block", mc.attention_block);
  const bool mla_given = read_mla_keys(m, mc.mla_dims);
  m.read("n_dense_layers", mc.moe.n_dense_layers);
  m.read("n_routed_experts", mc.moe.n_routed_experts);
  m.read("n_shared_experts", mc.moe.n_shared_experts);
  m.read("top_k", mc.moe.top_k);
  m.read("expert_ffn", mc.moe.expert_ffn);
  m.read("router", mc.moe.router);
  m.read("bias_update_rate", mc.moe.bias_update_rate);
  m.read("balance_loss_alpha", mc.moe.balance_loss_alpha);
  m.read("capacity_factor", mc.moe.capacity_factor);
  m.read("n_group", mc.moe.n_group);
  if (!m.read("topk_group", mc.moe.topk_group)) mc.moe.topk_group = mc.moe.n_group;
  // max_groups grouped the experts by expert-parallel rank, so a run routed differently at each
  // ep; 0 (no limit, what earlier run configs and checkpoints wrote) still reads.
  int64_t max_groups = 0;
  m.read("max_groups", max_groups);
  m.read("mtp_depth", mc.mtp.depth);
  m.read("mtp_loss_weight", mc.mtp.loss_weight);
  m.read("mtp_loss_weight_after", mc.mtp.loss_weight_after);
  m.read("mtp_loss_weight_switch_step", mc.mtp.switch_step);
  m.reject_unknown();
  naming_source(source, "", [&] {
    mc.dtype = parse_dtype(dtype);
    mc.set_recompute(recompute);
  });
  if (max_groups != 0)
    throw Error(fmt::format(
        "{}: model.max_groups = {} was removed: it grouped experts by expert-parallel rank, so "
        "the routing changed with the layout; use model.n_group (the experts in n_group groups by "
        "index) and model.topk_group (the groups a token may use), DeepSeek-V3's rule",
        source, max_groups));
  set_attention(source, attention, kernel, kernel_given, mla_given, mc);
  naming_source(source, "", [&] { mc.validate(); });
  validate_model_numerics(mc, source);
}

}  // namespace trillion::config_reading
