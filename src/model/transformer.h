// Transformer: the whole model as one stage with one activation slot — the one-process model
// for a micro-batch shape [B, T]: a ParameterSet over the full parameter table and a StageModel
// over every unit. forward is a flat list of layer calls; backward is the same list reversed.
// backward() runs dgrad and wgrad layer by layer; backward_input() + backward_weight() run all
// dgrads first and all wgrads after (what zero-bubble schedules do) and give bitwise the same
// gradients. Training goes through the step runner (train/step_runner.h), which runs stages under
// a schedule; this class is for generation, tests and tools. See model/glossary.h for the
// dimension letters and the accumulation rule.
#pragma once

#include <cstdint>
#include <memory>

#include "model/stage_model.h"

namespace trillion {

struct BatchShape {
  int64_t batch = 1;    // B
  int64_t seq_len = 0;  // T (<= config.seq_len)
};

// The global parameter table of a config (plan::parameter_table of its spec, in its dtype), in
// layout order: embed, layers.{l}.{attn_norm, attn.wq, attn.wk, attn.wv, attn.wo, mlp_norm,
// mlp.w_gate, mlp.w_up, mlp.w_down}, final_norm, lm_head.
TensorTable build_parameter_table(const ModelConfig& config);

class Transformer {
 public:
  // Allocates everything up front (so the memory report is the whole story): parameters,
  // gradients, activations for `batch`, and workspace. `split_backward` keeps one stash per
  // layer so backward_input() and backward_weight() can run as separate passes.
  // restart_positions: RoPE positions restart at every document of set_documents
  // (data.restart_positions).
  Transformer(const ModelConfig& config, const BatchShape& batch, Backend& backend,
              MemoryTracker& tracker, bool split_backward = false, ModelStorage storage = {},
              bool restart_positions = false);

  // Layout-independent init (ParameterSet::init): normal(init_std) for matrices,
  // init_std / sqrt(2L) for the residual output projections (wo, w_down), ones for norms.
  void init_parameters(uint64_t seed) { params_.init(seed); }

  // tokens, targets: [B*T] row-major. Returns the mean cross-entropy over the B*T positions.
  double forward(const int32_t* tokens, const int32_t* targets);
  // Accumulates parameter gradients of grad_scale * sum(losses of the last forward);
  // grad_scale = 1 / (B*T*accumulation) gives the gradient of the mean loss.
  void backward(double grad_scale) { stage_->backward(0, grad_scale); }
  void backward_input(double grad_scale) { stage_->backward_input(0, grad_scale); }
  void backward_weight() { stage_->backward_weight(0); }
  void zero_grad() { params_.zero_grad(); }
  // Packed documents: starts[B*T] (StageModel::set_documents); nullptr: causal attention.
  void set_documents(const int32_t* starts) { stage_->set_documents(0, starts); }

  int num_units() const { return params_.num_units(); }
  const UnitRange& unit_range(int unit) const { return params_.unit_range(unit); }
  void bind_parameters(int unit, void* data) { params_.bind_parameters(unit, data); }
  void bind_gradients(int unit, void* data) { params_.bind_gradients(unit, data); }
  HookChain& hooks() { return params_.hooks(); }

  const ModelConfig& config() const { return config_; }
  const BatchShape& batch() const { return batch_; }
  const TensorTable& table() const { return params_.table(); }
  ParameterSet& parameter_set() { return params_; }
  StageModel& stage() { return *stage_; }
  // The model's own flat buffers (empty when ModelStorage says they live elsewhere).
  Buffer& parameters() { return params_.parameters(); }
  Buffer& gradients() { return params_.gradients(); }
  const Tensor& losses() const { return stage_->losses(0); }  // [N] of the last forward
  const Tensor& final_hidden() const { return stage_->final_hidden(0); }  // [N, C] head input
  Tensor head_weight() const;                                              // [V, C]
  Backend& backend() { return be_; }

 private:
  ModelConfig config_;
  BatchShape batch_;
  Backend& be_;
  ParallelContext ctx_;
  ParameterSet params_;
  std::unique_ptr<StageModel> stage_;
};

}  // namespace trillion
