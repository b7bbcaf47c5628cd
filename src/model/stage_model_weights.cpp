// StageModel's weight binding (see stage_model.h): the parameter-table indices of a layer's
// tensors (find_layer_specs) and the views of them, or of their gradients, that the block, MTP
// and head modules take. Views only: nothing here allocates or copies.
#include <string>
#include <vector>

#include "model/stage_model.h"

namespace trillion {

StageModel::LayerSpecs StageModel::find_layer_specs(const std::string& p, bool moe) const {
  const TensorTable& t = params_.table();
  // MLA's block has a query latent (wq_a, q_norm, wq_b) unless q_lora_rank = 0 (wq), and the KV
  // latent (wkv_a, kv_norm, wkv_b); the table says which (the MTP modules' blocks follow the
  // main model's attention).
  const bool q_latent = t.contains(p + "attn.wq_b");
  LayerSpecs ls{t.index(p + "attn_norm"), t.index(p + (q_latent ? "attn.wq_b" : "attn.wq")),
                t.index(p + "attn.wo"), t.index(p + "mlp_norm")};
  auto optional = [&](const std::string& name) { return t.contains(name) ? t.index(name) : -1; };
  if (t.contains(p + "attn.wkv_a")) {
    ls.wq_a = optional(p + "attn.wq_a");
    ls.q_norm = optional(p + "attn.q_norm");
    ls.wkv_a = t.index(p + "attn.wkv_a");
    ls.kv_norm = t.index(p + "attn.kv_norm");
    ls.wkv_b = t.index(p + "attn.wkv_b");
  }
  if (moe) {
    ls.moe = true;
    ls.router = t.index(p + "moe.router");
    ls.router_bias = optional(p + "moe.router_bias");
    ls.shared_gate = optional(p + "moe.shared.w_gate");
    ls.shared_down = optional(p + "moe.shared.w_down");
    ls.experts_gate = t.index(p + "moe.experts.w_gate");
    ls.experts_up = t.index(p + "moe.experts.w_up");
    ls.experts_down = t.index(p + "moe.experts.w_down");
  } else {
    ls.w_gate = t.index(p + "mlp.w_gate");
    ls.w_down = t.index(p + "mlp.w_down");
  }
  return ls;
}

BlockWeights StageModel::block_weights(bool grads, const LayerSpecs& s, int64_t layer) const {
  auto at = [&](int spec) { return grads ? params_.grad(spec) : params_.param(spec); };
  const int64_t C = ctx_.shape.d_model;
  // wq|wk|wv and w_gate|w_up are contiguous in the table: view them as one matrix each.
  auto joined = [&](int first, int64_t rows) {
    return Tensor(at(first).raw(), params_.dtype(), {rows, C});
  };
  BlockWeights w;
  // The global layer index: a pipeline stage's GEMMs take the precision one process gives them.
  w.attn.layer = w.mlp.layer = w.moe.layer = w.moe.shared.layer = layer;
  w.attn_norm = at(s.attn_norm);
  if (s.wkv_a >= 0) {  // MLA
    w.mla.layer = layer;
    if (s.wq_a >= 0) {
      w.mla.wq_a = at(s.wq_a);
      w.mla.q_norm = at(s.q_norm);
    }
    w.mla.wq = at(s.wq);
    w.mla.wkv_a = at(s.wkv_a);
    w.mla.kv_norm = at(s.kv_norm);
    w.mla.wkv_b = at(s.wkv_b);
    w.mla.wo = at(s.wo);
  } else {
    w.attn.wqkv = joined(s.wq, ctx_.shape.qkv_width());
    w.attn.wo = at(s.wo);
  }
  w.mlp_norm = at(s.mlp_norm);
  if (!s.moe) {
    w.mlp.w_gate_up = joined(s.w_gate, 2 * ctx_.shape.ffn);
    w.mlp.w_down = at(s.w_down);
    return w;
  }
  w.moe.router.router = at(s.router);
  // The bias steers routing and is moved by the balancing rule: it has no gradient.
  if (!grads && s.router_bias >= 0) w.moe.router.bias = at(s.router_bias);
  if (s.shared_gate >= 0) {
    w.moe.shared.w_gate_up = joined(
        s.shared_gate, 2 * config_.moe.n_shared_experts * config_.moe.expert_ffn / ctx_.tp_size());
    w.moe.shared.w_down = at(s.shared_down);
  }
  w.moe.gate = at(s.experts_gate);
  w.moe.up = at(s.experts_up);
  w.moe.down = at(s.experts_down);
  return w;
}

std::vector<MtpWeights> StageModel::mtp_weights(bool grads) const {
  auto at = [&](int spec) { return grads ? params_.grad(spec) : params_.param(spec); };
  std::vector<MtpWeights> w;
  for (size_t k = 0; k < mtp_specs_.size(); ++k) {
    const MtpSpecs& m = mtp_specs_[k];
    w.push_back({at(m.enorm), at(m.hnorm), at(m.eh_proj),
                 block_weights(grads, m.block, config_.n_layers + static_cast<int64_t>(k)),
                 at(m.final_norm)});
  }
  return w;
}

MtpShared StageModel::mtp_shared(bool grads) const {
  auto at = [&](int spec) { return grads ? params_.grad(spec) : params_.param(spec); };
  return {at(embed_spec_), at(head_spec_)};
}

LmHeadWeights StageModel::head_weights(bool grads) const {
  auto at = [&](int spec) { return grads ? params_.grad(spec) : params_.param(spec); };
  return {at(final_norm_spec_), at(head_spec_)};
}

}  // namespace trillion
