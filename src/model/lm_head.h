// LM head module: final RMSNorm, output projection and softmax cross-entropy, fused so the
// logits[N, V] = norm(x)[N, C] W[V, C]^T are never stored whole: they are computed one row block
// [R, V] at a time, reduced to lse and loss, and recomputed block by block in backward (one extra
// head GEMM per backward pass; counted in HFU, not MFU). backward() does dgrad and wgrad from one
// recomputation; backward_input and backward_weight each recompute, for schedules that defer
// wgrad. See model/glossary.h.
#pragma once

#include "model/carver.h"
#include "model/parallel_context.h"

namespace trillion {

struct LmHeadWeights {  // parameters or their gradients (same layout)
  Tensor final_norm;    // [C]
  Tensor head;          // [V, C] (the embedding table when tied)
};

struct LmHeadActivations {  // saved by forward for backward
  Tensor normed;            // [N, C] final norm output (the head GEMM's input)
  Tensor rstd;              // [N]
  Tensor lse;               // [N] log-sum-exp of each logit row
  Tensor losses;            // [N] per-position cross-entropy
};

class LmHead {
 public:
  LmHead(Backend& backend, const ParallelContext& ctx, double norm_eps)
      : be_(backend), ctx_(ctx), eps_(norm_eps) {}

  LmHeadActivations carve(Carver& kept) const;
  Tensor carve_logits(Carver& workspace) const;  // [R, V] row block, shared
  void set_logits_block(Tensor block) { logits_ = block; }

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
  // Calls f(begin, end, dlogits) for each row block after computing its dlogits.
  template <typename F>
  void for_each_dlogits_block(const Tensor& normed, const Tensor& head, const Tensor& lse,
                              const int32_t* targets, double grad_scale, F&& f);
  Backend& be_;
  const ParallelContext& ctx_;
  double eps_;
  Tensor logits_;
};

}  // namespace trillion
