// StageModel: a contiguous slice of the model — global units [first_unit, last_unit], with the
// embedding if unit 0 is in it and the LM head + loss if the last unit is — that a pipeline rank
// runs for each micro-batch in flight. Its activations live in slots, one per micro-batch in
// flight (as many as the schedule's simulator says the rank holds at its peak); a slot is taken by
// forward and stays until the micro-batch's backward (or backward_weight) is done.
//
// Under tensor parallelism (ctx.tp) every module runs its tp shard; with sequence parallelism
// the [N, C] tensors below hold this rank's N/tp rows (ParallelContext::residual_tokens).
//
//   input(slot)        [N, C]  non-first stages: the executor writes the received activation here
//   forward(slot)      returns the sum of the per-position losses on the head stage (0 elsewhere)
//   output(slot)       [N, C]  non-last stages: the activation to send on
//   grad(slot)         [N, C]  non-last stages: the executor writes dL/d(output) here before the
//                              backward; after it, it holds dL/d(input) (to send back)
//   backward(slot, s)  dgrad + wgrad layer by layer (s = dL/dloss per position on the head stage)
//   backward_input(slot, s), backward_weight(slot)   the same in two passes (split_backward)
//
// Parameters come from the rank's ParameterSet (bound per unit; hooks bracket every pass). One
// stage holding every unit with one slot is today's one-process model (model/transformer.h).
// See model/glossary.h for letters and the accumulation rule.
#pragma once

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "model/block.h"
#include "model/config.h"
#include "model/embedding.h"
#include "model/lm_head.h"
#include "model/mtp.h"
#include "model/parameters.h"
#include "plan/activation_memory.h"

namespace trillion {

struct StageRange {
  int first_unit = 0, last_unit = 0;  // global units, inclusive
};

// A step's routing statistics of a stage's MoE layers (training micro-batches only).
struct MoeStepStats {
  std::vector<int64_t> layers;  // global layer of each MoE layer of the stage (MTP module k: L + k)
  std::vector<std::vector<double>> loads;  // [layer][expert] tokens routed (dropped excluded)
  double balance_loss = 0;                 // sum over the stage's layers and sequences
  int64_t dropped = 0;                     // assignments over capacity
};

struct StageOptions {
  int slots = 1;
  // Keep what backward_weight needs per slot and layer, so backward_input and backward_weight
  // can run as separate passes (zero-bubble schedules defer W).
  bool split_backward = false;
  // Document masking (data.restart_positions): RoPE positions restart at every document, so the
  // RoPE table covers the whole sequence's positions.
  bool restart_positions = false;
};

class StageModel {
 public:
  // config must be validated; ctx and params must outlive the stage.
  StageModel(const ModelConfig& config, const ParallelContext& ctx, ParameterSet& params,
             StageRange range, StageOptions options, Backend& backend, MemoryTracker& tracker);

  const StageRange& range() const { return range_; }
  bool has_embedding() const { return range_.first_unit == 0; }
  bool has_head() const { return range_.last_unit == static_cast<int>(config_.n_layers) + 1; }
  int slots() const { return options_.slots; }
  // Token rows of one micro-batch on this rank (N); input/output/grad hold N/tp of them under
  // sequence parallelism.
  int64_t tokens() const { return ctx_.shape.tokens(); }
  bool split_backward() const { return options_.split_backward; }
  // The layers of this stage, for the activation formula.
  plan::StageExtent extent() const;

  void set_tokens(int slot, const int32_t* tokens);    // [N]; read by the embedding
  void set_targets(int slot, const int32_t* targets);  // [N]; read by the loss
  // Document masking: starts[B * T_whole] (T_whole = the whole sequence, every cp rank's rows)
  // gives, at each global position of each sequence, where its document begins
  // (backend.h DocumentMask); every layer's attention of the slot follows it until the next
  // call. nullptr: causal attention over the whole sequence.
  void set_documents(int slot, const int32_t* starts);
  // The step's micro-batch `slot` holds (set before its forward): with the layer, it keys the
  // precision recipe's stochastic rounding (model/linear_gemm.h), so every layout draws alike.
  void set_microbatch(int slot, int64_t microbatch) { slot_at(slot).microbatch = microbatch; }
  Tensor input(int slot) const { return slot_at(slot).input; }
  Tensor output(int slot) const;
  Tensor grad(int slot) const { return slot_at(slot).grad; }
  const Tensor& losses(int slot) const { return slot_at(slot).head.losses; }
  const Tensor& final_hidden(int slot) const { return slot_at(slot).head.normed; }

  double forward(int slot);
  void backward(int slot, double grad_scale);
  // MoE layers: the statistics since the last call (and resets them), and the routing bias of
  // stage layer i (empty for softmax routing).
  MoeStepStats take_moe_stats();
  // Frees the routed experts' per-micro-batch rows that forward-only passes (evaluation) leave
  // behind, since no backward_weight comes to free them.
  void release_expert_rows();
  // The balance loss of slot's last forward, summed over the stage's MoE layers and the slot's
  // sequences (the objective adds its mean over the step's sequences).
  double balance_loss(int slot) const;
  void backward_input(int slot, double grad_scale);
  void backward_weight(int slot);

  // Multi-token prediction (model/mtp.h; head stage with model.mtp_depth > 0): the weight lambda
  // of the step (the objective adds lambda / D times the depth losses), and the sums over
  // positions of each depth's loss of every forward since the last call (then reset).
  bool has_mtp() const { return mtp_ != nullptr; }
  void set_mtp_loss_weight(double lambda) { mtp_weight_ = lambda; }
  std::vector<double> take_mtp_losses();

 private:
  struct LayerSpecs {  // table indices of one layer's tensors (-1: absent)
    int attn_norm, wq, wo, mlp_norm, w_gate = -1, w_down = -1;
    bool moe = false;  // MoE layer: router, shared and routed experts instead of w_gate/w_down
    int router = -1, router_bias = -1, shared_gate = -1, shared_down = -1;
    int experts_gate = -1, experts_up = -1, experts_down = -1;
    // MLA (wq is then wq_b, or wq without query compression).
    int wq_a = -1, q_norm = -1, wkv_a = -1, kv_norm = -1, wkv_b = -1;
  };
  struct Slot {
    Tensor input;  // [N, C]
    std::vector<BlockActivations> layers;
    LmHeadActivations head;
    Tensor grad;                    // [N, C]
    Tensor d_normed;                // [N, C] (shared unless split_backward)
    std::vector<BlockStash> stash;  // one per layer with split_backward, else shared
    std::vector<int32_t> tokens, targets;
    std::vector<int32_t> document_starts;  // [B, T_whole] (document masking)
    std::vector<int32_t> rope_rows;        // [N] RoPE table row of each row (restart_positions)
    double grad_scale = 0;
    int64_t microbatch = 0;
  };
  const Slot& slot_at(int slot) const;
  Slot& slot_at(int slot) { return const_cast<Slot&>(std::as_const(*this).slot_at(slot)); }
  int64_t global_layer(size_t i) const {  // layer i of this stage in the whole model
    return std::max(range_.first_unit, 1) - 1 + static_cast<int64_t>(i);
  }
  LayerRecompute layer_recompute(size_t i) const;
  // Names layer i of `slot`'s micro-batch as the site of the GEMMs that follow (LinearPrecision).
  void name_site(const Slot& s, size_t i) const;
  BlockWeights block_weights(bool grads, size_t i) const {
    return block_weights(grads, layer_specs_[i], global_layer(i));
  }
  BlockWeights block_weights(bool grads, const LayerSpecs& s, int64_t layer) const;
  LayerSpecs find_layer_specs(const std::string& prefix, bool moe) const;
  struct MtpSpecs {  // table indices of one MTP module's tensors
    int enorm, hnorm, eh_proj, final_norm;
    LayerSpecs block;
  };
  std::vector<MtpWeights> mtp_weights(bool grads) const;
  MtpShared mtp_shared(bool grads) const;
  double mtp_scale(double grad_scale) const {
    return grad_scale * mtp_weight_ / static_cast<double>(config_.mtp.depth);
  }
  LmHeadWeights head_weights(bool grads) const;
  // Refills the shared recompute buffer with layer i of `slot` unless it already holds it.
  void ensure_recomputed(int slot, size_t i);
  // The units a pass visits, in order, and how: hooks learn which unit's parameters come next.
  struct Visit {
    int unit;
    Use use;
  };
  std::vector<Visit> visits(Pass pass) const;
  // Hooks of visit k of `list` (the head's visit brackets the tied embedding it borrows).
  void enter(Pass pass, const std::vector<Visit>& list, size_t k) const;
  void leave(Pass pass, const std::vector<Visit>& list, size_t k) const;
  void enter_head(Pass pass, const std::vector<Visit>& list) const;
  void leave_head(Pass pass, const std::vector<Visit>& list) const;

  ModelConfig config_;
  ParallelContext ctx_;
  ParameterSet& params_;
  StageRange range_;
  StageOptions options_;
  Backend& be_;
  std::unique_ptr<Moe> moe_;  // the MoE layers' module (nullptr for a dense model)
  Embedding embedding_;
  Block block_;
  LmHead head_;
  std::vector<LayerSpecs> layer_specs_;
  std::vector<int> layer_units_;  // local unit of each layer
  int embed_unit_ = -1, head_unit_ = -1, embed_spec_ = -1, final_norm_spec_ = -1, head_spec_ = -1;
  bool head_borrows_embedding_ = false;
  Buffer activations_, recompute_, workspace_;
  std::vector<Slot> slots_;
  std::vector<Visit> visits_[4];                   // per Pass
  std::vector<std::vector<MoeState>> moe_states_;  // [slot][layer] (MoE layers)
  MoeStepStats moe_stats_;
  std::unique_ptr<Mtp> mtp_;  // nullptr unless the head's stage with model.mtp_depth > 0
  std::vector<MtpSpecs> mtp_specs_;
  std::vector<double> mtp_sums_;  // [D] since take_mtp_losses
  double mtp_weight_ = 0;
  // A MoE layer's routing into the step's statistics (global: its layer, L + k for MTP module k).
  void count_routing(const MoeState& state, int64_t global);
  // Before a backward of layer i (of the MTP modules): the balance loss's weight, the statistics.
  void prepare_moe_backward(int slot, size_t i, double grad_scale);
  void prepare_mtp_backward(int slot, double grad_scale);
  BlockScratch scratch_;
  Tensor cos_sin_;  // [T, HD] (restart_positions: [T_whole, HD], one row per position)
  Tensor tp_full_;  // [N, C] SP only: the embedding's and the head's gathered / partial rows
  int recomputed_slot_ = -1;
  int64_t recomputed_layer_ = -1;
};

}  // namespace trillion
