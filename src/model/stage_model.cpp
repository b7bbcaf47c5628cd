// See stage_model.h.
#include "model/stage_model.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "plan/parameter_table.h"

namespace trillion {

StageModel::StageModel(const ModelConfig& config, const ParallelContext& ctx,
                       ParameterSet& params, StageRange range, StageOptions options,
                       Backend& backend, MemoryTracker& tracker)
    : config_(config),
      ctx_(ctx),
      params_(params),
      range_(range),
      options_(options),
      be_(backend),
      embedding_(backend, ctx_),
      block_(backend, ctx_, config.norm_eps, config.tiled_attention,
             {config.attention_block, config.attention_block}),
      head_(backend, ctx_, config.norm_eps) {
  const int L = static_cast<int>(config.n_layers);
  if (range.first_unit < 0 || range.last_unit > L + 1 || range.first_unit > range.last_unit) {
    throw Error(fmt::format("stage units [{}, {}] are not a slice of units 0..{}",
                            range.first_unit, range.last_unit, L + 1));
  }
  TRILLION_CHECK(options.slots >= 1, "a stage needs at least one activation slot");
  // Table indices and local units of what this stage runs.
  const TensorTable& t = params.table();
  auto unit_of = [&](int global) {
    const int u = params.local_unit(global);
    TRILLION_CHECK(u >= 0, fmt::format("the rank's parameters lack unit {}", global));
    return u;
  };
  if (has_embedding()) {
    embed_unit_ = unit_of(plan::embedding_unit());
    embed_spec_ = t.index("embed");
  }
  for (int u = std::max(range.first_unit, 1); u <= std::min(range.last_unit, L); ++u) {
    const std::string p = fmt::format("layers.{}.", u - 1);
    layer_units_.push_back(unit_of(u));
    layer_specs_.push_back({t.index(p + "attn_norm"), t.index(p + "attn.wq"),
                            t.index(p + "attn.wo"), t.index(p + "mlp_norm"),
                            t.index(p + "mlp.w_gate"), t.index(p + "mlp.w_down")});
  }
  if (has_head()) {
    head_unit_ = unit_of(L + 1);
    final_norm_spec_ = t.index("final_norm");
    if (config.tied_embeddings) {
      if (!t.contains("embed")) {
        throw Error(
            "tied embeddings need the embedding on the head's rank; use untied embeddings "
            "(model.tied_embeddings = false) with this pipeline layout");
      }
      head_spec_ = t.index("embed");
      head_borrows_embedding_ = true;  // the embedding is unit 0's, the head unit L + 1's
      embed_unit_ = unit_of(plan::embedding_unit());
    } else {
      head_spec_ = t.index("lm_head");
    }
  }

  // Saved activations, per slot: the same carving code counts, then takes the views. Recomputed
  // tensors of every layer share one buffer sized for the largest layer.
  const int64_t N = ctx_.shape.tokens(), C = ctx_.shape.d_model;
  slots_.resize(options.slots);
  int64_t shared_elements = 0;
  auto carve_activations = [&](Carver& kept, const Buffer* shared_buffer) {
    for (Slot& s : slots_) {
      s.input = kept.take({N, C});
      s.layers.clear();
      Tensor x = s.input;
      for (size_t i = 0; i < layer_specs_.size(); ++i) {
        Carver shared = shared_buffer ? Carver(*shared_buffer) : Carver();
        BlockActivations a = block_.carve(kept, shared, layer_recompute(i));
        shared_elements = std::max(shared_elements, shared.used());
        a.x = x;
        x = a.out;
        s.layers.push_back(a);
      }
      if (has_head()) s.head = head_.carve(kept);
    }
  };
  const DType dt = params.dtype();
  Carver count_acts;
  carve_activations(count_acts, nullptr);
  activations_ = Buffer(tracker, MemoryCategory::activations, dt, count_acts.used());
  recompute_ = Buffer(tracker, MemoryCategory::activations, dt, shared_elements);
  Carver take_acts(activations_);
  carve_activations(take_acts, &recompute_);

  // Workspace: per slot the running gradient (and with split_backward what W needs); shared
  // temporaries.
  const bool split = options.split_backward;
  Tensor logits;
  auto carve_workspace = [&](Carver& c) {
    std::vector<BlockStash> shared_stash;
    Tensor shared_d_normed;
    if (!split) {
      for (size_t i = 0; i < std::min<size_t>(1, layer_specs_.size()); ++i)
        shared_stash.push_back(block_.carve_stash(c));
      if (has_head()) shared_d_normed = c.take({N, C});
    }
    for (Slot& s : slots_) {
      s.grad = c.take({N, C});
      s.stash.clear();
      if (split) {
        for (size_t i = 0; i < layer_specs_.size(); ++i) s.stash.push_back(block_.carve_stash(c));
        if (has_head()) s.d_normed = c.take({N, C});
      } else {
        s.stash = shared_stash;
        s.d_normed = shared_d_normed;
      }
    }
    scratch_ = block_.carve_scratch(c);
    cos_sin_ = c.take({ctx_.shape.seq, ctx_.shape.head_dim});
    if (has_head()) logits = head_.carve_logits(c);
  };
  Carver count_ws;
  carve_workspace(count_ws);
  workspace_ = Buffer(tracker, MemoryCategory::workspace, dt, count_ws.used());
  Carver take_ws(workspace_);
  carve_workspace(take_ws);
  if (has_head()) head_.set_logits_block(logits);

  // RoPE table: angle(t, i) = t * theta^(-2i/HD), computed in double.
  const int64_t T = ctx_.shape.seq, HD = ctx_.shape.head_dim, half = HD / 2;
  std::vector<double> cs(T * HD);
  for (int64_t pos = 0; pos < T; ++pos) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle =
          pos * std::pow(config.rope_theta, -2.0 * static_cast<double>(i) / HD);
      cs[pos * HD + i] = std::cos(angle);
      cs[pos * HD + half + i] = std::sin(angle);
    }
  }
  be_.copy(cos_sin_, Tensor(cs.data(), DType::f64, {T, HD}));
}

plan::StageExtent StageModel::extent() const {
  return {std::max(range_.first_unit, 1) - 1, static_cast<int64_t>(layer_specs_.size()),
          has_head()};
}

const StageModel::Slot& StageModel::slot_at(int slot) const {
  TRILLION_CHECK(slot >= 0 && slot < slots(),
                 fmt::format("activation slot {} out of range (the stage has {})", slot, slots()));
  return slots_[slot];
}

Tensor StageModel::output(int slot) const {
  const Slot& s = slot_at(slot);
  return s.layers.empty() ? s.input : s.layers.back().out;
}

void StageModel::set_tokens(int slot, const int32_t* tokens) {
  slot_at(slot).tokens.assign(tokens, tokens + ctx_.shape.tokens());
}

void StageModel::set_targets(int slot, const int32_t* targets) {
  slot_at(slot).targets.assign(targets, targets + ctx_.shape.tokens());
}

LayerRecompute StageModel::layer_recompute(size_t i) const {
  switch (config_.recompute) {
    case plan::Recompute::kNone:
      return LayerRecompute::none;
    case plan::Recompute::kSelective:
      return LayerRecompute::selective;
    case plan::Recompute::kFull:
      return global_layer(i) % config_.recompute_every == 0 ? LayerRecompute::full
                                                            : LayerRecompute::none;
  }
  return LayerRecompute::none;
}

BlockWeights StageModel::block_weights(bool grads, size_t i) const {
  const LayerSpecs& s = layer_specs_[i];
  auto at = [&](int spec) { return grads ? params_.grad(spec) : params_.param(spec); };
  const int64_t C = ctx_.shape.d_model;
  // wq|wk|wv and w_gate|w_up are contiguous in the table: view them as one matrix each.
  auto joined = [&](int first, int64_t rows) {
    return Tensor(at(first).raw(), params_.dtype(), {rows, C});
  };
  BlockWeights w;
  w.attn_norm = at(s.attn_norm);
  w.attn.wqkv = joined(s.wq, ctx_.shape.qkv_width());
  w.attn.wo = at(s.wo);
  w.mlp_norm = at(s.mlp_norm);
  w.mlp.w_gate_up = joined(s.w_gate, 2 * ctx_.shape.ffn);
  w.mlp.w_down = at(s.w_down);
  return w;
}

LmHeadWeights StageModel::head_weights(bool grads) const {
  auto at = [&](int spec) { return grads ? params_.grad(spec) : params_.param(spec); };
  return {at(final_norm_spec_), at(head_spec_)};
}

void StageModel::ensure_recomputed(int slot, size_t i) {
  const LayerRecompute r = layer_recompute(i);
  if (r == LayerRecompute::none) return;
  if (recomputed_slot_ == slot && recomputed_layer_ == static_cast<int64_t>(i)) return;
  block_.recompute(block_weights(false, i), slots_[slot].layers[i], cos_sin_, r);
  recomputed_slot_ = slot;
  recomputed_layer_ = static_cast<int64_t>(i);
}

void StageModel::head_hooks(bool before, Pass pass) {
  const HookChain& h = params_.hooks();
  if (before) {
    h.before(head_unit_, pass);
    if (head_borrows_embedding_) h.before(embed_unit_, pass, Use::borrowed);
  } else {
    if (head_borrows_embedding_) h.after(embed_unit_, pass, Use::borrowed);
    h.after(head_unit_, pass);
  }
}

double StageModel::forward(int slot) {
  Slot& s = slot_at(slot);
  const HookChain& h = params_.hooks();
  if (has_embedding()) {
    TRILLION_CHECK(!s.tokens.empty(), "forward of the first stage before set_tokens");
    h.before(embed_unit_, Pass::forward);
    embedding_.forward(s.input, s.tokens.data(), params_.param(embed_spec_));
    h.after(embed_unit_, Pass::forward);
  }
  for (size_t i = 0; i < layer_specs_.size(); ++i) {
    h.before(layer_units_[i], Pass::forward);
    block_.forward(block_weights(false, i), s.layers[i], cos_sin_);
    h.after(layer_units_[i], Pass::forward);
  }
  recomputed_slot_ = -1;  // the shared recompute buffer holds whatever layer wrote it last
  if (!has_head()) return 0;
  TRILLION_CHECK(!s.targets.empty(), "forward of the last stage before set_targets");
  head_hooks(true, Pass::forward);
  head_.forward(output(slot), head_weights(false), s.head, s.targets.data());
  head_hooks(false, Pass::forward);
  const int64_t N = ctx_.shape.tokens();
  std::vector<double> host(N);
  be_.copy(Tensor(host.data(), DType::f64, {N}), s.head.losses);
  double sum = 0;
  for (double v : host) sum += v;
  return sum;
}

void StageModel::backward(int slot, double grad_scale) {
  Slot& s = slot_at(slot);
  const HookChain& h = params_.hooks();
  if (has_head()) {
    head_hooks(true, Pass::backward);
    be_.fill(s.grad, 0.0);
    head_.backward(s.grad, s.d_normed, head_weights(true), output(slot), head_weights(false),
                   s.head, s.targets.data(), grad_scale);
    head_hooks(false, Pass::backward);
  }
  for (size_t i = layer_specs_.size(); i-- > 0;) {
    h.before(layer_units_[i], Pass::backward);
    ensure_recomputed(slot, i);
    block_.backward_input(s.grad, block_weights(false, i), s.layers[i], s.stash[0], scratch_,
                          cos_sin_);
    block_.backward_weight(block_weights(true, i), s.layers[i], s.stash[0]);
    h.after(layer_units_[i], Pass::backward);
  }
  if (has_embedding()) {
    h.before(embed_unit_, Pass::backward);
    embedding_.backward_weight(params_.grad(embed_spec_), s.tokens.data(), s.grad);
    h.after(embed_unit_, Pass::backward);
  }
}

void StageModel::backward_input(int slot, double grad_scale) {
  TRILLION_CHECK(options_.split_backward,
                 "backward_input needs a stage built with split_backward");
  Slot& s = slot_at(slot);
  const HookChain& h = params_.hooks();
  s.grad_scale = grad_scale;
  if (has_head()) {
    head_hooks(true, Pass::backward_input);
    be_.fill(s.grad, 0.0);
    head_.backward_input(s.grad, s.d_normed, output(slot), head_weights(false), s.head,
                         s.targets.data(), grad_scale);
    head_hooks(false, Pass::backward_input);
  }
  for (size_t i = layer_specs_.size(); i-- > 0;) {
    h.before(layer_units_[i], Pass::backward_input);
    ensure_recomputed(slot, i);
    block_.backward_input(s.grad, block_weights(false, i), s.layers[i], s.stash[i], scratch_,
                          cos_sin_);
    h.after(layer_units_[i], Pass::backward_input);
  }
}

void StageModel::backward_weight(int slot) {
  TRILLION_CHECK(options_.split_backward,
                 "backward_weight needs a stage built with split_backward");
  Slot& s = slot_at(slot);
  const HookChain& h = params_.hooks();
  // Same order of accumulation into each gradient as backward(), so results are bitwise equal.
  if (has_head()) {
    head_hooks(true, Pass::backward_weight);
    head_.backward_weight(head_weights(true), s.d_normed, output(slot), head_weights(false),
                          s.head, s.targets.data(), s.grad_scale);
    head_hooks(false, Pass::backward_weight);
  }
  for (size_t i = layer_specs_.size(); i-- > 0;) {
    h.before(layer_units_[i], Pass::backward_weight);
    ensure_recomputed(slot, i);
    block_.backward_weight(block_weights(true, i), s.layers[i], s.stash[i]);
    h.after(layer_units_[i], Pass::backward_weight);
  }
  if (has_embedding()) {
    h.before(embed_unit_, Pass::backward_weight);
    embedding_.backward_weight(params_.grad(embed_spec_), s.tokens.data(), s.grad);
    h.after(embed_unit_, Pass::backward_weight);
  }
}

}  // namespace trillion
