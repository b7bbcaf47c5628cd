// See stage_model.h.
#include "model/stage_model.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "model/linear_gemm.h"
#include "plan/parameter_table.h"

namespace trillion {

namespace {
std::unique_ptr<Moe> make_moe(const ModelConfig& c, const ParallelContext& ctx, Backend& be,
                              MemoryTracker& tracker) {
  if (!c.moe.enabled()) return nullptr;
  auto moe = std::make_unique<Moe>(be, ctx, c.moe, ctx.experts);
  moe->set_tracker(tracker);
  return moe;
}
}  // namespace

StageModel::StageModel(const ModelConfig& config, const ParallelContext& ctx, ParameterSet& params,
                       StageRange range, StageOptions options, Backend& backend,
                       MemoryTracker& tracker)
    : config_(config),
      ctx_(ctx),
      params_(params),
      range_(range),
      options_(options),
      be_(backend),
      moe_(make_moe(config, ctx_, backend, tracker)),
      embedding_(backend, ctx_),
      block_(backend, ctx_, config.norm_eps, config.tiled_attention,
             {config.attention_block, config.attention_block}, moe_.get(),
             config.mla ? &config.mla_dims : nullptr),
      head_(backend, ctx_, config.norm_eps) {
  const int L = static_cast<int>(config.n_layers);
  if (range.first_unit < 0 || range.last_unit > L + 1 || range.first_unit > range.last_unit) {
    throw Error(fmt::format("stage units [{}, {}] are not a slice of units 0..{}", range.first_unit,
                            range.last_unit, L + 1));
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
    layer_specs_.push_back(find_layer_specs(p, config.moe_layer(u - 1)));
    if (config.moe_layer(u - 1)) moe_stats_.layers.push_back(u - 1);
  }
  if (has_head()) {
    head_unit_ = unit_of(L + 1);
    final_norm_spec_ = t.index("final_norm");
    // A tied head reads the embedding table; MTP modules look tokens up in it.
    if (config.tied_embeddings || config.mtp.enabled()) {
      if (!t.contains("embed")) {
        throw Error(
            "tied embeddings and multi-token prediction need the embedding on the head's rank; "
            "use untied embeddings (model.tied_embeddings = false) and model.mtp_depth = 0 with "
            "this pipeline layout, or the dualpipe schedule");
      }
      head_borrows_embedding_ = true;  // the embedding is unit 0's, the head unit L + 1's
      embed_unit_ = unit_of(plan::embedding_unit());
      embed_spec_ = t.index("embed");
    }
    head_spec_ = t.index(config.tied_embeddings ? "embed" : "lm_head");
    // The modules' blocks are MoE blocks when the last layer is one (plan/parameter_table.h);
    // their routing statistics are layers L + k's.
    const bool mtp_moe = config.mtp.enabled() && config.moe_layer(config.n_layers - 1);
    for (int64_t k = 0; k < config.mtp.depth; ++k) {
      const std::string p = fmt::format("mtp.{}.", k);
      mtp_specs_.push_back({t.index(p + "enorm"), t.index(p + "hnorm"), t.index(p + "eh_proj"),
                            t.index(p + "final_norm"), find_layer_specs(p, mtp_moe)});
      if (mtp_moe) moe_stats_.layers.push_back(config.n_layers + k);
    }
  }

  // Saved activations, per slot: the same carving code counts, then takes the views. Recomputed
  // tensors of every layer share one buffer sized for the largest layer.
  // Under sequence parallelism the residual stream (input, grad, the head's d_normed) holds this
  // rank's Nr = N/tp token rows; the embedding and the head reduce-scatter from / gather into
  // one shared [N, C] scratch (tp_full_).
  const int64_t N = ctx_.shape.tokens(), Nr = ctx_.residual_tokens(), C = ctx_.shape.d_model;
  slots_.resize(options.slots);
  moe_states_.resize(options.slots);
  for (auto& per_slot : moe_states_) per_slot.resize(layer_specs_.size());
  moe_stats_.loads.assign(moe_stats_.layers.size(),
                          std::vector<double>(config.moe.n_routed_experts));
  int64_t shared_elements = 0;
  auto carve_activations = [&](Carver& kept, const Buffer* shared_buffer) {
    for (size_t slot = 0; slot < slots_.size(); ++slot) {
      Slot& s = slots_[slot];
      s.input = kept.take({Nr, C});
      s.layers.clear();
      Tensor x = s.input;
      for (size_t i = 0; i < layer_specs_.size(); ++i) {
        Carver shared = shared_buffer ? Carver(*shared_buffer) : Carver();
        MoeState* moe = layer_specs_[i].moe ? &moe_states_[slot][i] : nullptr;
        BlockActivations a = block_.carve(kept, shared, layer_recompute(i), moe);
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
      if (has_head()) shared_d_normed = c.take({Nr, C});
    }
    for (size_t slot = 0; slot < slots_.size(); ++slot) {
      Slot& s = slots_[slot];
      for (size_t i = 0; i < layer_specs_.size(); ++i) {
        if (layer_specs_[i].moe) moe_->carve_stash(c, moe_states_[slot][i]);
      }
      s.grad = c.take({Nr, C});
      s.stash.clear();
      if (split) {
        for (size_t i = 0; i < layer_specs_.size(); ++i) s.stash.push_back(block_.carve_stash(c));
        if (has_head()) s.d_normed = c.take({Nr, C});
      } else {
        s.stash = shared_stash;
        s.d_normed = shared_d_normed;
      }
    }
    scratch_ = block_.carve_scratch(c);
    cos_sin_ =
        c.take({options_.restart_positions ? ctx_.shape.seq * ctx_.sequence.cp : ctx_.shape.seq,
                ctx_.shape.rope_dim});
    if (has_head()) logits = head_.carve_logits(c);
    if (ctx_.sequence_parallel() && (has_head() || has_embedding())) tp_full_ = c.take({N, C});
  };
  Carver count_ws;
  carve_workspace(count_ws);
  workspace_ = Buffer(tracker, MemoryCategory::workspace, dt, count_ws.used());
  Carver take_ws(workspace_);
  carve_workspace(take_ws);
  if (has_head()) head_.set_logits_block(logits, tp_full_);
  if (!mtp_specs_.empty()) {
    mtp_ = std::make_unique<Mtp>(config.mtp.depth, config.norm_eps, ctx_, block_, head_, embedding_,
                                 backend, tracker, dt, options.slots,
                                 mtp_specs_[0].block.moe ? moe_.get() : nullptr);
    mtp_->set_site(config.n_layers);
    mtp_->set_tp_full(tp_full_);
    mtp_sums_.assign(config.mtp.depth, 0.0);
    mtp_weight_ = config.mtp.weight_at(0);
  }

  // RoPE table: angle(t, i) = p(t) * theta^(-2i/HD), computed in double, at the global position
  // p(t) of local row t (context parallelism holds chunks of the sequence, sequence_split.h).
  // Under restart_positions, table row t is position t itself (rows are picked per document).
  // HD here is the rotated width (MLA: qk_rope_head_dim).
  const int64_t T = cos_sin_.size(0), HD = ctx_.shape.rope_dim, half = HD / 2;
  std::vector<int64_t> positions(T);
  if (options_.restart_positions) {
    for (int64_t t = 0; t < T; ++t) positions[t] = t;
  } else {
    positions = ctx_.sequence.positions(T * ctx_.sequence.cp, ctx_.cp_rank);
  }
  std::vector<double> cs(T * HD);
  for (int64_t t = 0; t < T; ++t) {
    const double pos = static_cast<double>(positions[t]);
    for (int64_t i = 0; i < half; ++i) {
      const double angle = pos * std::pow(config.rope_theta, -2.0 * static_cast<double>(i) / HD);
      cs[t * HD + i] = std::cos(angle);
      cs[t * HD + half + i] = std::sin(angle);
    }
  }
  be_.copy(cos_sin_, Tensor(cs.data(), DType::f64, {T, HD}));
  for (Pass pass : {Pass::forward, Pass::backward, Pass::backward_input, Pass::backward_weight}) {
    visits_[static_cast<int>(pass)] = visits(pass);
  }
}

std::vector<StageModel::Visit> StageModel::visits(Pass pass) const {
  std::vector<Visit> v;
  auto head = [&](Use use) {
    v.push_back({head_unit_, use});
    if (head_borrows_embedding_) v.push_back({embed_unit_, Use::borrowed});
  };
  const bool weight = pass == Pass::backward_weight;
  // A W pass reads a layer's parameters only to recompute its activations; the embedding's
  // gradient is a scatter of the saved output gradient; the head recomputes its logits.
  auto layer_use = [&](size_t i) {
    return weight && layer_recompute(i) == LayerRecompute::none ? Use::gradients_only : Use::own;
  };
  if (pass == Pass::forward) {
    if (has_embedding()) v.push_back({embed_unit_, Use::own});
    for (size_t i = 0; i < layer_units_.size(); ++i) v.push_back({layer_units_[i], Use::own});
    if (has_head()) head(Use::own);
    return v;
  }
  if (has_head()) head(Use::own);
  for (size_t i = layer_units_.size(); i-- > 0;) v.push_back({layer_units_[i], layer_use(i)});
  if (has_embedding() && pass != Pass::backward_input) {
    v.push_back({embed_unit_, weight ? Use::gradients_only : Use::own});
  }
  return v;
}

void StageModel::enter(Pass pass, const std::vector<Visit>& list, size_t k) const {
  int next = -1;
  for (size_t j = k + 1; j < list.size() && next < 0; ++j) {
    if (list[j].use != Use::gradients_only) next = list[j].unit;
  }
  params_.hooks().before(list[k].unit, pass, list[k].use, next);
}

void StageModel::leave(Pass pass, const std::vector<Visit>& list, size_t k) const {
  params_.hooks().after(list[k].unit, pass, list[k].use);
}

void StageModel::enter_head(Pass pass, const std::vector<Visit>& list) const {
  const size_t k = pass == Pass::forward ? list.size() - (head_borrows_embedding_ ? 2 : 1) : 0;
  enter(pass, list, k);
  if (head_borrows_embedding_) enter(pass, list, k + 1);
}

void StageModel::leave_head(Pass pass, const std::vector<Visit>& list) const {
  const size_t k = pass == Pass::forward ? list.size() - (head_borrows_embedding_ ? 2 : 1) : 0;
  if (head_borrows_embedding_) leave(pass, list, k + 1);
  leave(pass, list, k);
}

void StageModel::count_routing(const MoeState& state, int64_t global) {
  const Routing& r = state.routing;
  size_t layer = 0;
  while (moe_stats_.layers[layer] != global) ++layer;
  moe_->router().count_loads(r, moe_stats_.loads[layer]);
  moe_stats_.balance_loss += r.balance_loss;
  moe_stats_.dropped += r.dropped_count;
}

void StageModel::prepare_moe_backward(int slot, size_t i, double grad_scale) {
  if (!layer_specs_[i].moe) return;
  moe_states_[slot][i].grad_scale = grad_scale;
  count_routing(moe_states_[slot][i], global_layer(i));
}

void StageModel::prepare_mtp_backward(int slot, double grad_scale) {
  if (!mtp_->moe()) return;
  // Each module's MoE block is layer L + k: the main layers' balance-loss weight and statistics.
  for (size_t k = 0; k < mtp_specs_.size(); ++k) {
    MoeState& state = mtp_->moe_state(slot, k);
    state.grad_scale = grad_scale;
    count_routing(state, config_.n_layers + static_cast<int64_t>(k));
  }
}

double StageModel::balance_loss(int slot) const {
  double sum = 0;
  for (size_t i = 0; i < layer_specs_.size(); ++i) {
    if (layer_specs_[i].moe) sum += moe_states_.at(slot)[i].routing.balance_loss;
  }
  if (mtp_ && mtp_->moe()) {
    for (size_t k = 0; k < mtp_specs_.size(); ++k)
      sum += mtp_->moe_state(slot, k).routing.balance_loss;
  }
  return sum;
}

void StageModel::release_expert_rows() {
  for (auto& per_slot : moe_states_) {
    for (MoeState& s : per_slot) Moe::release_rows(s);
  }
  if (!mtp_ || !mtp_->moe()) return;
  for (int slot = 0; slot < slots(); ++slot) {
    for (size_t k = 0; k < mtp_specs_.size(); ++k) Moe::release_rows(mtp_->moe_state(slot, k));
  }
}

MoeStepStats StageModel::take_moe_stats() {
  MoeStepStats out = moe_stats_;
  for (auto& l : moe_stats_.loads) std::fill(l.begin(), l.end(), 0.0);
  moe_stats_.balance_loss = 0;
  moe_stats_.dropped = 0;
  return out;
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
  if (mtp_) mtp_->set_targets(slot, targets);
}

void StageModel::set_documents(int slot, const int32_t* starts) {
  Slot& s = slot_at(slot);
  DocumentMask mask;
  if (starts != nullptr) {
    const int64_t B = ctx_.shape.batch, T = ctx_.shape.seq, whole = T * ctx_.sequence.cp;
    s.document_starts.assign(starts, starts + B * whole);
    mask.start = s.document_starts.data();
    mask.stride = whole;
    if (options_.restart_positions) {
      const std::vector<int64_t> positions = ctx_.sequence.positions(whole, ctx_.cp_rank);
      s.rope_rows.resize(B * T);
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t t = 0; t < T; ++t) {
          const int64_t p = positions[t];
          s.rope_rows[b * T + t] = static_cast<int32_t>(p - mask.start[b * whole + p]);
        }
      }
      mask.rope = s.rope_rows.data();
    }
  }
  for (BlockActivations& layer : s.layers) layer.attn.documents = mask;
  if (mtp_) mtp_->set_documents(slot, mask);
}

void StageModel::name_site(const Slot& s, size_t i) const {
  if (ctx_.precision != nullptr) ctx_.precision->set_site(s.microbatch, global_layer(i));
}

LayerRecompute StageModel::layer_recompute(size_t i) const {
  if (config_.recompute_norm_up) return LayerRecompute::norm_up;
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

std::vector<double> StageModel::take_mtp_losses() {
  std::vector<double> out = mtp_sums_;
  std::fill(mtp_sums_.begin(), mtp_sums_.end(), 0.0);
  return out;
}

void StageModel::ensure_recomputed(int slot, size_t i) {
  const LayerRecompute r = layer_recompute(i);
  if (r == LayerRecompute::none) return;
  if (recomputed_slot_ == slot && recomputed_layer_ == static_cast<int64_t>(i)) return;
  block_.recompute(block_weights(false, i), slots_[slot].layers[i], cos_sin_, r);
  recomputed_slot_ = slot;
  recomputed_layer_ = static_cast<int64_t>(i);
}

double StageModel::forward(int slot) {
  Slot& s = slot_at(slot);
  const std::vector<Visit>& v = visits_[static_cast<int>(Pass::forward)];
  size_t k = 0;
  if (has_embedding()) {
    TRILLION_CHECK(!s.tokens.empty(), "forward of the first stage before set_tokens");
    enter(Pass::forward, v, k);
    embedding_.forward(s.input, s.tokens.data(), params_.param(embed_spec_), tp_full_);
    leave(Pass::forward, v, k++);
  }
  for (size_t i = 0; i < layer_specs_.size(); ++i, ++k) {
    enter(Pass::forward, v, k);
    name_site(s, i);
    block_.forward(block_weights(false, i), s.layers[i], cos_sin_);
    // A fully recomputed MoE layer frees its expert rows now; its backward routes and exchanges
    // them again.
    if (layer_specs_[i].moe && layer_recompute(i) == LayerRecompute::full) {
      Moe::release_rows(moe_states_[slot][i]);
    }
    leave(Pass::forward, v, k);
  }
  recomputed_slot_ = -1;  // the shared recompute buffer holds whatever layer wrote it last
  if (!has_head()) return 0;
  TRILLION_CHECK(!s.targets.empty(), "forward of the last stage before set_targets");
  enter_head(Pass::forward, v);
  head_.forward(output(slot), head_weights(false), s.head, s.targets.data());
  if (mtp_) {
    mtp_->forward(slot, s.microbatch, output(slot), mtp_weights(false), mtp_shared(false),
                  cos_sin_);
    for (size_t k = 0; k < mtp_sums_.size(); ++k) mtp_sums_[k] += mtp_->losses(slot)[k];
  }
  leave_head(Pass::forward, v);
  const int64_t N = ctx_.shape.tokens();
  std::vector<double> host(N);
  be_.copy(Tensor(host.data(), DType::f64, {N}), s.head.losses);
  double sum = 0;
  for (double x : host) sum += x;
  return sum;
}

// In the backward passes the visits run head (+ borrowed embedding), layers downwards, embedding;
// `k` walks them.
void StageModel::backward(int slot, double grad_scale) {
  Slot& s = slot_at(slot);
  const std::vector<Visit>& v = visits_[static_cast<int>(Pass::backward)];
  size_t k = 0;
  if (has_head()) {
    enter_head(Pass::backward, v);
    be_.fill(s.grad, 0.0);
    head_.backward(s.grad, s.d_normed, head_weights(true), output(slot), head_weights(false),
                   s.head, s.targets.data(), grad_scale);
    if (mtp_) {
      prepare_mtp_backward(slot, grad_scale);
      mtp_->backward_input(slot, s.microbatch, output(slot), s.grad, mtp_weights(false),
                           mtp_shared(false), scratch_, cos_sin_, mtp_scale(grad_scale));
      mtp_->backward_weight(slot, mtp_weights(true), mtp_weights(false), mtp_shared(true),
                            mtp_shared(false), output(slot), mtp_scale(grad_scale));
    }
    leave_head(Pass::backward, v);
    k = head_borrows_embedding_ ? 2 : 1;
  }
  for (size_t i = layer_specs_.size(); i-- > 0; ++k) {
    enter(Pass::backward, v, k);
    name_site(s, i);
    ensure_recomputed(slot, i);
    prepare_moe_backward(slot, i, grad_scale);
    block_.backward_input(s.grad, block_weights(false, i), s.layers[i], s.stash[0], scratch_,
                          cos_sin_);
    block_.backward_weight(block_weights(true, i), s.layers[i], s.stash[0]);
    leave(Pass::backward, v, k);
  }
  if (has_embedding()) {
    enter(Pass::backward, v, k);
    embedding_.backward_weight(params_.grad(embed_spec_), s.tokens.data(), s.grad, tp_full_);
    leave(Pass::backward, v, k);
  }
}

void StageModel::backward_input(int slot, double grad_scale) {
  TRILLION_CHECK(options_.split_backward, "backward_input needs a stage built with split_backward");
  Slot& s = slot_at(slot);
  const std::vector<Visit>& v = visits_[static_cast<int>(Pass::backward_input)];
  size_t k = 0;
  s.grad_scale = grad_scale;
  if (has_head()) {
    enter_head(Pass::backward_input, v);
    be_.fill(s.grad, 0.0);
    head_.backward_input(s.grad, s.d_normed, output(slot), head_weights(false), s.head,
                         s.targets.data(), grad_scale);
    if (mtp_) {
      prepare_mtp_backward(slot, grad_scale);
      mtp_->backward_input(slot, s.microbatch, output(slot), s.grad, mtp_weights(false),
                           mtp_shared(false), scratch_, cos_sin_, mtp_scale(grad_scale));
    }
    leave_head(Pass::backward_input, v);
    k = head_borrows_embedding_ ? 2 : 1;
  }
  for (size_t i = layer_specs_.size(); i-- > 0; ++k) {
    enter(Pass::backward_input, v, k);
    name_site(s, i);
    ensure_recomputed(slot, i);
    prepare_moe_backward(slot, i, grad_scale);
    block_.backward_input(s.grad, block_weights(false, i), s.layers[i], s.stash[i], scratch_,
                          cos_sin_);
    leave(Pass::backward_input, v, k);
  }
}

void StageModel::backward_weight(int slot) {
  TRILLION_CHECK(options_.split_backward,
                 "backward_weight needs a stage built with split_backward");
  Slot& s = slot_at(slot);
  const std::vector<Visit>& v = visits_[static_cast<int>(Pass::backward_weight)];
  size_t k = 0;
  // Same order of accumulation into each gradient as backward(), so results are bitwise equal.
  if (has_head()) {
    enter_head(Pass::backward_weight, v);
    head_.backward_weight(head_weights(true), s.d_normed, output(slot), head_weights(false), s.head,
                          s.targets.data(), s.grad_scale);
    if (mtp_) {
      mtp_->backward_weight(slot, mtp_weights(true), mtp_weights(false), mtp_shared(true),
                            mtp_shared(false), output(slot), mtp_scale(s.grad_scale));
    }
    leave_head(Pass::backward_weight, v);
    k = head_borrows_embedding_ ? 2 : 1;
  }
  for (size_t i = layer_specs_.size(); i-- > 0; ++k) {
    enter(Pass::backward_weight, v, k);
    name_site(s, i);
    ensure_recomputed(slot, i);
    block_.backward_weight(block_weights(true, i), s.layers[i], s.stash[i]);
    leave(Pass::backward_weight, v, k);
  }
  if (has_embedding()) {
    enter(Pass::backward_weight, v, k);
    embedding_.backward_weight(params_.grad(embed_spec_), s.tokens.data(), s.grad, tp_full_);
    leave(Pass::backward_weight, v, k);
  }
}

}  // namespace trillion
