// LM head module: final RMSNorm, output projection and softmax cross-entropy, fused so the
// logits[N, V] = norm(x)[N, C] W[V, C]^T are never stored whole: they are computed one row block
// [R, V] at a time, reduced to lse and loss, and recomputed block by block in backward (one extra
// head GEMM per backward pass; counted in HFU, not MFU). backward() does dgrad and wgrad from one
// recomputation; backward_input and backward_weight each recompute, for schedules that defer
// wgrad. See model/glossary.h.
//
// Under tp the head is vocabulary-parallel (Megatron-LM 1909.08053 §3): this rank holds rows
// [r V/tp, (r+1) V/tp) of W and computes only its logit columns; the cross-entropy reduces each
// row's max (all-reduce max) and its rescaled sum of exponentials and target logit (one
// all-reduce sum of 2 values per row) over tp, so the [N, V] logits are never gathered. The
// input gradient d_normed is partial over the vocabulary shards: copy_to_tp's backward sums it.
// With sequence parallelism x, normed and d_normed hold the rank's N/tp rows; normed is
// all-gathered into normed_full (kept: the head GEMM's input, as a block keeps norm1_full) and
// d_normed reduce-scattered back; final_norm's gradient is then partial over tp (the step
// reduces it with the other tp-replicated norms).
#pragma once

#include <vector>

#include "model/carver.h"
#include "model/parallel_context.h"
#include "precision/recipe.h"

namespace trillion {

struct LmHeadWeights {  // parameters or their gradients (same layout)
  Tensor final_norm;    // [C]
  Tensor head;          // [V, C] (the embedding table when tied)
};

struct LmHeadActivations {  // saved by forward for backward
  Tensor normed;            // [N, C] final norm output (the head GEMM's input; SP: N/tp rows)
  Tensor rstd;              // [N] (SP: N/tp)
  Tensor normed_full;       // [N, C] SP only: normed gathered over tp
  Tensor lse;               // [N] log-sum-exp of each logit row
  Tensor losses;            // [N] per-position cross-entropy
};

class LmHead {
 public:
  LmHead(Backend& backend, const ParallelContext& ctx, double norm_eps)
      : be_(backend), ctx_(ctx), eps_(norm_eps) {}

  LmHeadActivations carve(Carver& kept) const;
  Tensor carve_logits(Carver& workspace) const;  // [R, V/tp] row block, shared
  // partial [N, C]: SP only, the shared scratch d_normed is summed in before its reduce-scatter.
  void set_logits_block(Tensor block, Tensor partial = {}) {
    logits_ = block;
    partial_ = partial;
  }

  // losses[N] = lse - logit[target] of norm(x).
  void forward(const Tensor& x, const LmHeadWeights& w, const LmHeadActivations& a,
               const int32_t* targets);
  // dx[N, C] += dL/dx (the residual stream's gradient), d_normed[N, C] = dL/d(norm(x)) (kept for
  // backward_weight), where dL/dloss_n = grad_scale; backward() also does the weight gradients.
  void backward(Tensor dx, Tensor d_normed, const LmHeadWeights& grads, const Tensor& x,
                const LmHeadWeights& w, const LmHeadActivations& a, const int32_t* targets,
                double grad_scale);
  void backward_input(Tensor dx, Tensor d_normed, const Tensor& x, const LmHeadWeights& w,
                      const LmHeadActivations& a, const int32_t* targets, double grad_scale);
  void backward_weight(const LmHeadWeights& grads, const Tensor& d_normed, const Tensor& x,
                       const LmHeadWeights& w, const LmHeadActivations& a, const int32_t* targets,
                       double grad_scale);

 private:
  // A head GEMM: fp32 on the backend, or the bf16 recipe's GEMM under precision.head = "bf16"
  // (LinearPrecision::head_gemm).
  void head_gemm(precision::GemmPass pass, Tensor C, bool ta, bool tb, const Tensor& A,
                 const Tensor& B, double beta);
  // Calls f(begin, end, dlogits) for each row block after computing its dlogits.
  template <typename F>
  void for_each_dlogits_block(const Tensor& normed, const Tensor& head, const Tensor& lse,
                              const int32_t* targets, double grad_scale, F&& f);
  // The head GEMM's input: normed, or normed_full under SP.
  const Tensor& gemm_input(const LmHeadActivations& a) const {
    return ctx_.sequence_parallel() ? a.normed_full : a.normed;
  }
  // Under tp: lse[N] and losses[N] from every rank's shard statistics (stats_).
  void reduce_vocab_shards(const LmHeadActivations& a, const int32_t* targets);
  // dlogits of one row block from its recomputed logits.
  void logits_backward(Tensor dlogits, const Tensor& lse, const int32_t* targets,
                       double grad_scale);
  // d_normed of the rank's rows from the partial d_normed of every row (in partial_ under SP).
  void reduce_d_normed(Tensor d_normed);
  Tensor d_normed_target(Tensor d_normed) const {
    return ctx_.sequence_parallel() ? partial_ : d_normed;
  }
  Backend& be_;
  const ParallelContext& ctx_;
  double eps_;
  Tensor logits_, partial_;
  std::vector<double> stats_;  // [N, 3] per-shard max, sum of exponentials, target logit
};

}  // namespace trillion
