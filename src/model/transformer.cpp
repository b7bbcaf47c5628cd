// See transformer.h.
#include "model/transformer.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "core/philox.h"

namespace trillion {

namespace {
constexpr int64_t kHeadRowBlock = 256;  // rows of logits materialised at once

ModelConfig validated(ModelConfig c) {
  c.validate();
  return c;
}
}  // namespace

TensorTable build_parameter_table(const ModelConfig& c) {
  const int64_t C = c.d_model, HD = c.head_dim, F = c.ffn_hidden;
  TensorTable t;
  t.add("embed", {c.vocab_size, C}, true);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = fmt::format("layers.{}.", l);
    t.add(p + "attn_norm", {C}, false);
    // wq, wk, wv back to back form the [QKV, C] matrix of one GEMM.
    t.add(p + "attn.wq", {c.n_heads * HD, C}, true);
    t.add(p + "attn.wk", {c.n_kv_heads * HD, C}, true);
    t.add(p + "attn.wv", {c.n_kv_heads * HD, C}, true);
    t.add(p + "attn.wo", {C, c.n_heads * HD}, true);
    t.add(p + "mlp_norm", {C}, false);
    // w_gate, w_up back to back form the [2F, C] matrix of one GEMM.
    t.add(p + "mlp.w_gate", {F, C}, true);
    t.add(p + "mlp.w_up", {F, C}, true);
    t.add(p + "mlp.w_down", {C, F}, true);
  }
  t.add("final_norm", {C}, false);
  if (!c.tied_embeddings) t.add("lm_head", {c.vocab_size, C}, true);
  return t;
}

AttentionShape Transformer::attention_shape() const {
  return {batch_.batch, batch_.seq_len, config_.n_heads, config_.n_kv_heads, config_.head_dim};
}

Transformer::Transformer(const ModelConfig& config, const BatchShape& batch, Backend& backend,
                         MemoryTracker& tracker, bool split_backward, ModelStorage storage)
    : config_(validated(config)),
      batch_(batch),
      be_(backend),
      block_(backend, attention_shape(), config_.norm_eps, config_.tiled_attention,
             {config_.attention_block, config_.attention_block}) {
  if (batch_.batch <= 0 || batch_.seq_len <= 0 || batch_.seq_len > config_.seq_len) {
    throw Error(
        fmt::format("micro-batch shape [{}, {}] invalid: need batch >= 1 and 1 <= seq_len "
                    "<= model.seq_len = {}",
                    batch_.batch, batch_.seq_len, config_.seq_len));
  }
  const AttentionShape s = attention_shape();
  const int64_t N = s.B * s.T, C = config_.d_model, F = config_.ffn_hidden;
  const int64_t L = config_.n_layers, V = config_.vocab_size;
  const DType dt = config_.dtype;

  table_ = build_parameter_table(config_);
  if (storage.parameters) {
    params_ = Buffer(tracker, MemoryCategory::parameters, dt, table_.total_elements());
  }
  if (storage.gradients) {
    grads_ = Buffer(tracker, MemoryCategory::gradients, dt, table_.total_elements());
  }
  // Units in table order: embed, layers.0.*, ..., layers.{L-1}.*, final_norm (+ lm_head).
  units_.assign(L + 2, UnitRange{});
  for (int i = 0; i < static_cast<int>(table_.specs().size()); ++i) {
    const TensorSpec& spec = table_.spec(i);
    int unit = static_cast<int>(L) + 1;
    if (spec.name == "embed") unit = 0;
    if (spec.name.starts_with("layers.")) unit = 1 + std::stoi(spec.name.substr(7));
    unit_of_.push_back(unit);
    UnitRange& r = units_[unit];
    if (r.size() == 0) r.begin = spec.offset;
    TRILLION_CHECK(r.end == 0 || r.end == spec.offset, "units must be contiguous in the table");
    r.end = spec.offset + spec.numel();
  }
  param_base_.assign(units_.size(), nullptr);
  grad_base_.assign(units_.size(), nullptr);
  const int64_t elem = static_cast<int64_t>(dtype_size(dt));
  for (size_t u = 0; u < units_.size(); ++u) {
    if (storage.parameters)
      param_base_[u] = static_cast<char*>(params_.raw()) + units_[u].begin * elem;
    if (storage.gradients)
      grad_base_[u] = static_cast<char*>(grads_.raw()) + units_[u].begin * elem;
  }

  // Saved activations: the same carving code counts, then takes the views. Recomputed tensors
  // of every layer share one buffer sized for the largest layer (plan/activation_memory.h).
  int64_t shared_elements = 0;
  auto carve_activations = [&](Carver& kept, const Buffer* shared_buffer) {
    embedded_ = kept.take({N, C});
    acts_.clear();
    Tensor x = embedded_;
    for (int64_t l = 0; l < L; ++l) {
      Carver shared = shared_buffer ? Carver(*shared_buffer) : Carver();
      BlockActivations a = BlockActivations::carve(kept, shared, layer_recompute(l), s, C, F,
                                                   config_.tiled_attention);
      shared_elements = std::max(shared_elements, shared.used());
      a.x = x;
      x = a.out;
      acts_.push_back(a);
    }
    normf_ = kept.take({N, C});
    rstdf_ = kept.take({N});
    lse_ = kept.take({N});
    losses_ = kept.take({N});
  };
  Carver count_acts;
  carve_activations(count_acts, nullptr);
  activations_ = Buffer(tracker, MemoryCategory::activations, dt, count_acts.used());
  recompute_ = Buffer(tracker, MemoryCategory::activations, dt, shared_elements);
  Carver take_acts(activations_);
  carve_activations(take_acts, &recompute_);

  auto carve_workspace = [&](Carver& c) {
    stash_.clear();
    for (int64_t i = 0; i < (split_backward ? L : 1); ++i) {
      stash_.push_back(BlockStash::carve(c, s, C, F));
    }
    scratch_ = BlockScratch::carve(c, s, C, F);
    dres_ = c.take({N, C});
    d_normf_ = c.take({N, C});
    cos_sin_ = c.take({s.T, s.HD});
    return c.take({std::min(N, kHeadRowBlock), V});
  };
  Carver count_ws;
  carve_workspace(count_ws);
  workspace_ = Buffer(tracker, MemoryCategory::workspace, dt, count_ws.used());
  Carver take_ws(workspace_);
  Tensor logits_block = carve_workspace(take_ws);
  head_ = LmHeadLoss(backend, logits_block);

  const char* head_name = config_.tied_embeddings ? "embed" : "lm_head";
  head_index_ = table_.index(head_name);

  // RoPE table: angle(t, i) = t * theta^(-2i/HD), computed in double.
  std::vector<double> cs(s.T * s.HD);
  const int64_t half = s.HD / 2;
  for (int64_t t = 0; t < s.T; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = t * std::pow(config_.rope_theta, -2.0 * static_cast<double>(i) / s.HD);
      cs[t * s.HD + i] = std::cos(angle);
      cs[t * s.HD + half + i] = std::sin(angle);
    }
  }
  be_.copy(cos_sin_, Tensor(cs.data(), DType::f64, {s.T, s.HD}));
}

LayerRecompute Transformer::layer_recompute(int64_t layer) const {
  switch (config_.recompute) {
    case plan::Recompute::kNone:
      return LayerRecompute::none;
    case plan::Recompute::kSelective:
      return LayerRecompute::selective;
    case plan::Recompute::kFull:
      return layer % config_.recompute_every == 0 ? LayerRecompute::full : LayerRecompute::none;
  }
  return LayerRecompute::none;
}

void Transformer::ensure_recomputed(int64_t layer) {
  const LayerRecompute r = layer_recompute(layer);
  if (r == LayerRecompute::none || recomputed_layer_ == layer) return;
  block_.recompute(block_view(Store::params, layer), acts_[layer], cos_sin_, r);
  recomputed_layer_ = layer;
}

Tensor Transformer::view(Store store, int index) const {
  const TensorSpec& spec = table_.spec(index);
  const int unit = unit_of_[index];
  char* base = (store == Store::params ? param_base_ : grad_base_)[unit];
  TRILLION_CHECK(base != nullptr,
                 fmt::format("{} of unit {} used while not bound ({})",
                             store == Store::params ? "parameters" : "gradients", unit, spec.name));
  const int64_t elem = static_cast<int64_t>(dtype_size(config_.dtype));
  return Tensor(base + (spec.offset - units_[unit].begin) * elem, config_.dtype, spec.shape.data(),
                static_cast<int>(spec.shape.size()));
}

void Transformer::bind_parameters(int unit, void* data) {
  TRILLION_CHECK(unit >= 0 && unit < num_units(), "unit out of range");
  param_base_[unit] = static_cast<char*>(data);
}

void Transformer::bind_gradients(int unit, void* data) {
  TRILLION_CHECK(unit >= 0 && unit < num_units(), "unit out of range");
  grad_base_[unit] = static_cast<char*>(data);
}

BlockWeights Transformer::block_view(Store store, int64_t layer) const {
  const std::string p = fmt::format("layers.{}.", layer);
  const int64_t C = config_.d_model, F = config_.ffn_hidden;
  const int64_t qkv = attention_shape().qkv_width();
  auto at = [&](const std::string& name) { return view(store, table_.index(p + name)); };
  // wq|wk|wv and w_gate|w_up are contiguous in the table: view them as one matrix each.
  auto joined = [&](const std::string& first, int64_t rows) {
    return Tensor(at(first).raw(), config_.dtype, {rows, C});
  };
  BlockWeights w;
  w.attn_norm = at("attn_norm");
  w.wqkv = joined("attn.wq", qkv);
  w.wo = at("attn.wo");
  w.mlp_norm = at("mlp_norm");
  w.w_gate_up = joined("mlp.w_gate", 2 * F);
  w.w_down = at("mlp.w_down");
  return w;
}

void Transformer::init_parameters(uint64_t seed) {
  const double std_resid = config_.init_std / std::sqrt(2.0 * config_.n_layers);
  std::vector<double> values;
  for (int i = 0; i < static_cast<int>(table_.specs().size()); ++i) {
    const TensorSpec& spec = table_.spec(i);
    values.resize(spec.numel());
    const bool is_norm = !spec.weight_decay;
    const bool is_resid = spec.name.ends_with("attn.wo") || spec.name.ends_with("mlp.w_down");
    const double sd = is_resid ? std_resid : config_.init_std;
    const Philox rng(seed, "init:" + spec.name);
    for (int64_t k = 0; k < spec.numel(); ++k) values[k] = is_norm ? 1.0 : sd * rng.normal(k);
    Tensor dst = param(i);
    be_.copy(dst.view({dst.numel()}), Tensor(values.data(), DType::f64, {spec.numel()}));
  }
}

void Transformer::zero_grad() {
  if (grads_.count() > 0) be_.fill(grads_.flat(), 0.0);
}

double Transformer::forward(const int32_t* tokens, const int32_t* targets) {
  const int64_t N = batch_.batch * batch_.seq_len;
  tokens_.assign(tokens, tokens + N);
  targets_.assign(targets, targets + N);
  const int head_unit = num_units() - 1;
  hook(&UnitHooks::before_forward, 0);
  be_.embedding_forward(embedded_, tokens_.data(), param("embed"));
  hook(&UnitHooks::after_forward, 0);
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    hook(&UnitHooks::before_forward, static_cast<int>(l) + 1);
    block_.forward(block_view(Store::params, l), acts_[l], cos_sin_);
    hook(&UnitHooks::after_forward, static_cast<int>(l) + 1);
  }
  recomputed_layer_ = -1;  // the shared recompute buffer holds whatever layer wrote it last
  hook(&UnitHooks::before_forward, head_unit);
  be_.rmsnorm_forward(normf_, rstdf_, acts_.back().out, param("final_norm"), config_.norm_eps);
  head_.forward(losses_, lse_, normf_, param(head_index_), targets_.data());
  hook(&UnitHooks::after_forward, head_unit);
  std::vector<double> host(N);
  be_.copy(Tensor(host.data(), DType::f64, {N}), losses_);
  double sum = 0;
  for (double v : host) sum += v;
  return sum / static_cast<double>(N);
}

void Transformer::backward(double grad_scale) {
  // Head and final norm: dgrad and wgrad together.
  const int head_unit = num_units() - 1;
  hook(&UnitHooks::before_backward, head_unit);
  head_.backward(d_normf_, view(Store::grads, head_index_), normf_, param(head_index_), lse_,
                 targets_.data(), grad_scale);
  be_.fill(dres_, 0.0);
  be_.rmsnorm_backward_input(dres_, d_normf_, acts_.back().out, param("final_norm"), rstdf_);
  be_.rmsnorm_backward_weight(grad("final_norm"), d_normf_, acts_.back().out, rstdf_);
  hook(&UnitHooks::after_backward, head_unit);
  for (int64_t l = config_.n_layers - 1; l >= 0; --l) {
    hook(&UnitHooks::before_backward, static_cast<int>(l) + 1);
    ensure_recomputed(l);
    block_.backward_input(dres_, block_view(Store::params, l), acts_[l], stash_[0], scratch_,
                          cos_sin_);
    block_.backward_weight(block_view(Store::grads, l), acts_[l], stash_[0]);
    hook(&UnitHooks::after_backward, static_cast<int>(l) + 1);
  }
  hook(&UnitHooks::before_backward, 0);
  be_.embedding_backward_weight(grad("embed"), tokens_.data(), dres_);
  hook(&UnitHooks::after_backward, 0);
}

void Transformer::backward_input(double grad_scale) {
  TRILLION_CHECK(stash_.size() == static_cast<size_t>(config_.n_layers),
                 "backward_input needs a model built with split_backward");
  grad_scale_ = grad_scale;
  head_.backward_input(d_normf_, normf_, param(head_index_), lse_, targets_.data(), grad_scale);
  be_.fill(dres_, 0.0);
  be_.rmsnorm_backward_input(dres_, d_normf_, acts_.back().out, param("final_norm"), rstdf_);
  for (int64_t l = config_.n_layers - 1; l >= 0; --l) {
    ensure_recomputed(l);
    block_.backward_input(dres_, block_view(Store::params, l), acts_[l], stash_[l], scratch_,
                          cos_sin_);
  }
}

void Transformer::backward_weight() {
  // Same order of accumulation into each gradient as backward(), so results are bitwise equal.
  head_.backward_weight(view(Store::grads, head_index_), normf_, param(head_index_), lse_,
                        targets_.data(), grad_scale_);
  be_.rmsnorm_backward_weight(grad("final_norm"), d_normf_, acts_.back().out, rstdf_);
  for (int64_t l = config_.n_layers - 1; l >= 0; --l) {
    ensure_recomputed(l);
    block_.backward_weight(block_view(Store::grads, l), acts_[l], stash_[l]);
  }
  be_.embedding_backward_weight(grad("embed"), tokens_.data(), dres_);
}

}  // namespace trillion
