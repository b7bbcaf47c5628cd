// ModelConfig: the shape and numerics of a Llama-3-style decoder. Plain data; parsed from the
// [model] table of a run config (train/run_config.cpp) and validated before any allocation, so a
// bad value is reported by name instead of failing deep inside a kernel.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "plan/activation_memory.h"
#include "plan/model_spec.h"

namespace trillion {

// Mixture of Experts (DeepSeek-V3 2412.19437 §2.1.2): layers from n_dense_layers on replace the
// dense MLP by n_shared always-on experts plus top_k of n_routed routed SwiGLU experts of width
// expert_ffn. See model/moe.h for the routing maths.
struct MoeConfig {
  int64_t n_dense_layers = 0;
  int64_t n_routed_experts = 0;  // E; 0: a dense model
  int64_t n_shared_experts = 0;
  int64_t top_k = 0;       // K
  int64_t expert_ffn = 0;  // FE
  // "sigmoid_bias": sigmoid affinities, top-k on affinity + bias, gates = chosen affinities
  // normalised, bias nudged by bias_update_rate after each step (aux-loss-free balancing), plus a
  // sequence-wise balance loss of weight balance_loss_alpha. "softmax_aux": softmax top-k with
  // an auxiliary load-balancing loss of weight balance_loss_alpha (Switch/GShard).
  std::string router = "sigmoid_bias";
  double bias_update_rate = 0.001;  // gamma
  double balance_loss_alpha = 1e-4;
  double capacity_factor = 0;  // > 0: at most ceil(cf * N * K / E) tokens per expert; 0: dropless
  // Group-limited routing (DeepSeek-V3's n_group / topk_group, sigmoid_bias only): the experts
  // are n_group contiguous groups of E / n_group by index; a token chooses its top_k among the
  // experts of its topk_group best groups (model/router.h). 1 / 1: no limit.
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool enabled() const { return n_routed_experts > 0; }
};

// Multi-token prediction (DeepSeek-V3 2412.19437 §2.2): `depth` sequential modules after the main
// model, module k predicting the token k + 1 ahead (model/mtp.h). The objective is the main loss
// plus lambda / depth times the sum of the depth losses, lambda = loss_weight for the first
// switch_step steps and loss_weight_after from then on (DeepSeek-V3: 0.3 for the first 10T
// tokens, 0.1 for the last 4.8T: switch_step = 10T / tokens per step).
struct MtpConfig {
  int64_t depth = 0;  // D; 0: no MTP modules
  double loss_weight = 0.3;
  double loss_weight_after = -1;  // < 0: loss_weight for the whole run
  int64_t switch_step = 0;        // steps that use loss_weight before loss_weight_after
  bool enabled() const { return depth > 0; }
  // lambda of the step with 0-based index `step` (metrics.jsonl's step - 1).
  double weight_at(int64_t step) const {
    return loss_weight_after >= 0 && step >= switch_step ? loss_weight_after : loss_weight;
  }
};

// Multi-head latent attention (DeepSeek-V2 2405.04434 §2.1, V3 2412.19437 §2.1.1; model/mla.h):
// queries through a q_lora_rank latent (0: directly from x, as DeepSeek-V2-Lite), keys and values
// through a kv_lora_rank latent plus one decoupled RoPE key of qk_rope_head_dim shared by all
// heads. Query/key heads are qk_nope_head_dim + qk_rope_head_dim wide, value heads v_head_dim.
struct MlaConfig {
  int64_t q_lora_rank = 0;       // DQ (0: no query compression)
  int64_t kv_lora_rank = 0;      // DC
  int64_t qk_nope_head_dim = 0;  // DN
  int64_t qk_rope_head_dim = 0;  // DR
  int64_t v_head_dim = 0;        // VD
};

struct ModelConfig {
  int64_t vocab_size = 0;  // V
  int64_t d_model = 0;     // C
  int64_t n_layers = 0;    // L
  int64_t n_heads = 0;     // NH
  int64_t n_kv_heads = 0;  // KV (0 means = n_heads)
  int64_t head_dim = 0;    // HD (0 means d_model / n_heads)
  int64_t ffn_hidden = 0;  // F
  int64_t seq_len = 0;     // T: the longest sequence the model is built for
  bool tied_embeddings = false;
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  double init_std = 0.02;
  DType dtype = DType::f32;  // compute and storage dtype of the CPU engine (f32 or f64)
  // Activation recomputation (config key recompute = none | selective | full | full:K).
  plan::Recompute recompute = plan::Recompute::kNone;
  int64_t recompute_every = 1;  // full:K recomputes layers l with l % K == 0
  // recompute = "norm-up" (DeepSeek-V3 §3.2.3): recompute kNone plus every RMSNorm output and
  // MLA's up-projected Q, K, V recomputed in backward (plan::RecomputePolicy::kNormUp).
  bool recompute_norm_up = false;
  // attention_kernel = "tiled" (FlashAttention) | "materialized": the attention core of both
  // modules (the legacy spelling attention = "tiled" | "materialized" means GQA with that core).
  bool tiled_attention = true;
  bool mla = false;  // attention = "mla" (else "gqa": grouped-query attention, model/attention.h)
  MlaConfig mla_dims;
  int64_t attention_block = 0;  // tile size of tiled attention; 0 = chosen from the cache size
  MoeConfig moe;
  MtpConfig mtp;
  // Whether layer l is a MoE layer.
  bool moe_layer(int64_t l) const { return moe.enabled() && l >= moe.n_dense_layers; }

  // Parses "none", "selective", "full", "full:K" or "norm-up" into recompute / recompute_every
  // / recompute_norm_up.
  void set_recompute(const std::string& text);
  std::string recompute_string() const;
  plan::ActivationPolicy activation_policy() const {
    return {recompute, recompute_every, tiled_attention, recompute_norm_up};
  }

  // The RoPE width of a head: qk_rope_head_dim under MLA, else head_dim.
  int64_t rope_dim() const { return mla ? mla_dims.qk_rope_head_dim : head_dim; }
  // The value head width VD: v_head_dim under MLA, else head_dim.
  int64_t value_dim() const { return mla ? mla_dims.v_head_dim : head_dim; }

  // Fills the derived defaults (n_kv_heads, head_dim; under MLA head_dim = qk_nope + qk_rope and
  // n_kv_heads = n_heads) and throws Error naming the first invalid
  // field and how to fix it.
  void validate();
  void validate_mtp() const;  // the model.mtp_* keys (called by validate)
  void validate_mla();  // validate()'s MLA part (mla only): fills head_dim and n_kv_heads
  // The planner's description of this model: plan::parameter_table(spec()) is the table the
  // engine allocates, and plan's counts and FLOPs of it are the engine's.
  plan::ModelSpec spec() const;
};

}  // namespace trillion
