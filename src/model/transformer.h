// Transformer: a Llama-3-style decoder for one micro-batch shape [B, T]. Parameters, gradients,
// saved activations and workspace each live in one flat Buffer with named views; the parameter
// layout is the TensorTable (names like "layers.3.attn.wqkv"), shared by gradients, optimizer
// state and checkpoints. forward is a flat list of layer calls; backward is the same list
// reversed. backward() runs dgrad and wgrad layer by layer; backward_input() + backward_weight()
// run all dgrads first and all wgrads after (what zero-bubble schedules do) and give bitwise the
// same gradients. See model/glossary.h for the dimension letters and accumulation rule.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/tensor_table.h"
#include "model/block.h"
#include "model/config.h"
#include "model/lm_head.h"

namespace trillion {

struct BatchShape {
  int64_t batch = 1;    // B
  int64_t seq_len = 0;  // T (<= config.seq_len)
};

// The parameter table of a config, in layout order: embed, layers.{l}.{attn_norm, attn.wq,
// attn.wk, attn.wv, attn.wo, mlp_norm, mlp.w_gate, mlp.w_up, mlp.w_down}, final_norm, lm_head.
TensorTable build_parameter_table(const ModelConfig& config);

// Parameter units: the granularity at which data parallelism and ZeRO see the model. Unit 0 is
// the embedding, unit 1 + l is layer l, unit L + 1 is the final norm and the LM head; each unit
// is one contiguous range of the parameter table, in table order.
struct UnitRange {
  int64_t begin = 0, end = 0;  // elements of the flat parameter table
  int64_t size() const { return end - begin; }
};

// Called by the model around each unit's use (data parallelism and ZeRO implement them). Forward
// visits units 0, 1, ..., L+1; backward visits L+1, L, ..., 0 (backward() only; the split
// backward_input/backward_weight passes do not call hooks). after_backward(u) means unit u's
// gradients are final for this micro-batch.
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual void before_forward(int unit) {}
  virtual void after_forward(int unit) {}
  virtual void before_backward(int unit) {}
  virtual void after_backward(int unit) {}
};

// Which flat buffers the model allocates itself. ZeRO-2 keeps gradients, ZeRO-3 parameters and
// gradients elsewhere and binds each unit's memory (bind_parameters/bind_gradients) before the
// model touches it.
struct ModelStorage {
  bool parameters = true;
  bool gradients = true;
};

class Transformer {
 public:
  // Allocates everything up front (so the memory report is the whole story): parameters,
  // gradients, activations for `batch`, and workspace. `split_backward` keeps one stash per
  // layer so backward_input() and backward_weight() can run as separate passes.
  Transformer(const ModelConfig& config, const BatchShape& batch, Backend& backend,
              MemoryTracker& tracker, bool split_backward = false, ModelStorage storage = {});

  // Scaled-normal init from Philox keyed by (seed, tensor name, element index): std init_std for
  // matrices, init_std / sqrt(2L) for the residual output projections (wo, w_down), ones for
  // norms. Independent of how the parameters are later sharded.
  void init_parameters(uint64_t seed);

  // tokens, targets: [B*T] row-major. Returns the mean cross-entropy over the B*T positions.
  double forward(const int32_t* tokens, const int32_t* targets);
  // Accumulates parameter gradients of grad_scale * sum(losses of the last forward);
  // grad_scale = 1 / (B*T*accumulation) gives the gradient of the mean loss.
  void backward(double grad_scale);
  void backward_input(double grad_scale);  // requires split_backward
  void backward_weight();                  // after backward_input
  // Zeroes the model's own gradient buffer (nothing when gradients live elsewhere).
  void zero_grad();

  int num_units() const { return static_cast<int>(units_.size()); }
  const UnitRange& unit_range(int unit) const { return units_.at(unit); }
  // Unit `unit`'s parameters (gradients) now live at `data`: the unit's first element at the
  // pointer. nullptr unbinds (a use while unbound is an internal error, not a wild read).
  void bind_parameters(int unit, void* data);
  void bind_gradients(int unit, void* data);
  void set_hooks(UnitHooks* hooks) { hooks_ = hooks; }

  const ModelConfig& config() const { return config_; }
  const BatchShape& batch() const { return batch_; }
  const TensorTable& table() const { return table_; }
  // The model's own flat buffers (empty when ModelStorage says they live elsewhere).
  Buffer& parameters() { return params_; }
  Buffer& gradients() { return grads_; }
  const Tensor& losses() const { return losses_; }       // [N] per-position losses of last forward
  const Tensor& final_hidden() const { return normf_; }  // [N, C] input of the LM head
  Tensor head_weight() const { return param(head_index_); }  // [V, C]
  Backend& backend() { return be_; }

 private:
  enum class Store { params, grads };
  // Views of table entry `index` in the current parameter or gradient binding of its unit.
  Tensor view(Store store, int index) const;
  Tensor param(int index) const { return view(Store::params, index); }
  Tensor param(const std::string& name) const { return param(table_.index(name)); }
  Tensor grad(const std::string& name) const { return view(Store::grads, table_.index(name)); }
  BlockWeights block_view(Store store, int64_t layer) const;
  void hook(void (UnitHooks::*call)(int), int unit) {
    if (hooks_ != nullptr) (hooks_->*call)(unit);
  }
  LayerRecompute layer_recompute(int64_t layer) const;
  // Refills the shared recompute buffer with `layer`'s tensors unless it already holds them.
  void ensure_recomputed(int64_t layer);
  AttentionShape attention_shape() const;

  ModelConfig config_;
  BatchShape batch_;
  Backend& be_;
  TensorTable table_;
  Buffer params_, grads_, activations_, recompute_, workspace_;
  TransformerBlock block_;
  std::vector<BlockActivations> acts_;
  std::vector<BlockStash> stash_;  // one, or one per layer with split_backward
  BlockScratch scratch_;
  Tensor embedded_;       // [N, C] embedding output = layer 0 input
  Tensor normf_, rstdf_;  // [N, C], [N]
  Tensor lse_, losses_;   // [N], [N]
  Tensor dres_;           // [N, C] running residual gradient
  Tensor d_normf_;        // [N, C]
  Tensor cos_sin_;        // [T, HD]
  int head_index_ = 0;    // table index of the LM head weight (embed when tied)
  std::vector<UnitRange> units_;
  std::vector<int> unit_of_;                   // table index -> unit
  std::vector<char*> param_base_, grad_base_;  // per unit: where element `begin` lives
  UnitHooks* hooks_ = nullptr;
  LmHeadLoss head_;
  std::vector<int32_t> tokens_, targets_;
  double grad_scale_ = 0;
  int64_t recomputed_layer_ = -1;
};

}  // namespace trillion
