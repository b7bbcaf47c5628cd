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
                         MemoryTracker& tracker, bool split_backward)
    : config_(validated(config)), batch_(batch), be_(backend),
      block_(backend, attention_shape(), config_.norm_eps, config_.tiled_attention,
             {config_.attention_block, config_.attention_block}) {
  if (batch_.batch <= 0 || batch_.seq_len <= 0 || batch_.seq_len > config_.seq_len) {
    throw Error(fmt::format("micro-batch shape [{}, {}] invalid: need batch >= 1 and 1 <= seq_len "
                            "<= model.seq_len = {}",
                            batch_.batch, batch_.seq_len, config_.seq_len));
  }
  const AttentionShape s = attention_shape();
  const int64_t N = s.B * s.T, C = config_.d_model, F = config_.ffn_hidden;
  const int64_t L = config_.n_layers, V = config_.vocab_size;
  const DType dt = config_.dtype;

  table_ = build_parameter_table(config_);
  params_ = Buffer(tracker, MemoryCategory::parameters, dt, table_.total_elements());
  grads_ = Buffer(tracker, MemoryCategory::gradients, dt, table_.total_elements());

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
  head_w_ = table_.view(params_, head_name);
  head_dw_ = table_.view(grads_, head_name);

  // RoPE table: angle(t, i) = t * theta^(-2i/HD), computed in double.
  std::vector<double> cs(s.T * s.HD);
  const int64_t half = s.HD / 2;
  for (int64_t t = 0; t < s.T; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle =
          t * std::pow(config_.rope_theta, -2.0 * static_cast<double>(i) / s.HD);
      cs[t * s.HD + i] = std::cos(angle);
      cs[t * s.HD + half + i] = std::sin(angle);
    }
  }
  be_.copy(cos_sin_, Tensor(cs.data(), DType::f64, {s.T, s.HD}));
}

LayerRecompute Transformer::layer_recompute(int64_t layer) const {
  switch (config_.recompute) {
    case plan::Recompute::kNone: return LayerRecompute::none;
    case plan::Recompute::kSelective: return LayerRecompute::selective;
    case plan::Recompute::kFull:
      return layer % config_.recompute_every == 0 ? LayerRecompute::full : LayerRecompute::none;
  }
  return LayerRecompute::none;
}

void Transformer::ensure_recomputed(int64_t layer) {
  const LayerRecompute r = layer_recompute(layer);
  if (r == LayerRecompute::none || recomputed_layer_ == layer) return;
  block_.recompute(block_view(params_, layer), acts_[layer], cos_sin_, r);
  recomputed_layer_ = layer;
}

BlockWeights Transformer::block_view(const Buffer& buffer, int64_t layer) const {
  const std::string p = fmt::format("layers.{}.", layer);
  const int64_t C = config_.d_model, F = config_.ffn_hidden;
  const int64_t qkv = attention_shape().qkv_width();
  // wq|wk|wv and w_gate|w_up are contiguous in the table: view them as one matrix each.
  auto joined = [&](const std::string& first, int64_t rows) {
    return Tensor(table_.view(buffer, first).raw(), buffer.dtype(), {rows, C});
  };
  BlockWeights w;
  w.attn_norm = table_.view(buffer, p + "attn_norm");
  w.wqkv = joined(p + "attn.wq", qkv);
  w.wo = table_.view(buffer, p + "attn.wo");
  w.mlp_norm = table_.view(buffer, p + "mlp_norm");
  w.w_gate_up = joined(p + "mlp.w_gate", 2 * F);
  w.w_down = table_.view(buffer, p + "mlp.w_down");
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
    Tensor dst = table_.view(params_, i);
    be_.copy(dst.view({dst.numel()}), Tensor(values.data(), DType::f64, {spec.numel()}));
  }
}

void Transformer::zero_grad() { be_.fill(grads_.flat(), 0.0); }

double Transformer::forward(const int32_t* tokens, const int32_t* targets) {
  const int64_t N = batch_.batch * batch_.seq_len;
  tokens_.assign(tokens, tokens + N);
  targets_.assign(targets, targets + N);
  be_.embedding_forward(embedded_, tokens_.data(), table_.view(params_, "embed"));
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    block_.forward(block_view(params_, l), acts_[l], cos_sin_);
  }
  recomputed_layer_ = -1;  // the shared recompute buffer holds whatever layer wrote it last
  be_.rmsnorm_forward(normf_, rstdf_, acts_.back().out, table_.view(params_, "final_norm"),
                      config_.norm_eps);
  head_.forward(losses_, lse_, normf_, head_w_, targets_.data());
  std::vector<double> host(N);
  be_.copy(Tensor(host.data(), DType::f64, {N}), losses_);
  double sum = 0;
  for (double v : host) sum += v;
  return sum / static_cast<double>(N);
}

void Transformer::backward(double grad_scale) {
  // Head and final norm: dgrad and wgrad together.
  head_.backward(d_normf_, head_dw_, normf_, head_w_, lse_, targets_.data(), grad_scale);
  be_.fill(dres_, 0.0);
  be_.rmsnorm_backward_input(dres_, d_normf_, acts_.back().out,
                             table_.view(params_, "final_norm"), rstdf_);
  be_.rmsnorm_backward_weight(table_.view(grads_, "final_norm"), d_normf_, acts_.back().out,
                              rstdf_);
  for (int64_t l = config_.n_layers - 1; l >= 0; --l) {
    ensure_recomputed(l);
    block_.backward_input(dres_, block_view(params_, l), acts_[l], stash_[0], scratch_, cos_sin_);
    block_.backward_weight(block_view(grads_, l), acts_[l], stash_[0]);
  }
  be_.embedding_backward_weight(table_.view(grads_, "embed"), tokens_.data(), dres_);
}

void Transformer::backward_input(double grad_scale) {
  TRILLION_CHECK(stash_.size() == static_cast<size_t>(config_.n_layers),
                 "backward_input needs a model built with split_backward");
  grad_scale_ = grad_scale;
  head_.backward_input(d_normf_, normf_, head_w_, lse_, targets_.data(), grad_scale);
  be_.fill(dres_, 0.0);
  be_.rmsnorm_backward_input(dres_, d_normf_, acts_.back().out,
                             table_.view(params_, "final_norm"), rstdf_);
  for (int64_t l = config_.n_layers - 1; l >= 0; --l) {
    ensure_recomputed(l);
    block_.backward_input(dres_, block_view(params_, l), acts_[l], stash_[l], scratch_, cos_sin_);
  }
}

void Transformer::backward_weight() {
  // Same order of accumulation into each gradient as backward(), so results are bitwise equal.
  head_.backward_weight(head_dw_, normf_, head_w_, lse_, targets_.data(), grad_scale_);
  be_.rmsnorm_backward_weight(table_.view(grads_, "final_norm"), d_normf_, acts_.back().out,
                              rstdf_);
  for (int64_t l = config_.n_layers - 1; l >= 0; --l) {
    ensure_recomputed(l);
    block_.backward_weight(block_view(grads_, l), acts_[l], stash_[l]);
  }
  be_.embedding_backward_weight(table_.view(grads_, "embed"), tokens_.data(), dres_);
}

}  // namespace trillion
