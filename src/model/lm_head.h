// The LM head fused with softmax cross-entropy: logits[N, V] = x[N, C] W[V, C]^T are never
// stored whole; they are computed one row block [R, V] at a time, reduced to lse and loss, and
// recomputed block by block in backward (one extra head GEMM per backward pass; counted in HFU,
// not MFU). backward() does dgrad and wgrad from one recomputation; backward_input and
// backward_weight each recompute, for schedules that defer wgrad.
#pragma once

#include "backend/backend.h"

namespace trillion {

class LmHeadLoss {
 public:
  // logits_block: workspace [R, V]; R is the row block.
  LmHeadLoss() = default;
  LmHeadLoss(Backend& backend, Tensor logits_block) : be_(&backend), logits_(logits_block) {}

  // losses[N] = lse - logit[target], lse[N] saved for backward.
  void forward(Tensor losses, Tensor lse, const Tensor& x, const Tensor& w, const int32_t* targets);
  // dx[N, C] = dL/dx and dw[V, C] += dL/dw, where dL/dloss_n = grad_scale for every n.
  void backward(Tensor dx, Tensor dw, const Tensor& x, const Tensor& w, const Tensor& lse,
                const int32_t* targets, double grad_scale);
  void backward_input(Tensor dx, const Tensor& x, const Tensor& w, const Tensor& lse,
                      const int32_t* targets, double grad_scale);
  void backward_weight(Tensor dw, const Tensor& x, const Tensor& w, const Tensor& lse,
                       const int32_t* targets, double grad_scale);

 private:
  // Calls f(begin, end, dlogits) for each row block after computing its dlogits.
  template <typename F>
  void for_each_dlogits_block(const Tensor& x, const Tensor& w, const Tensor& lse,
                              const int32_t* targets, double grad_scale, F&& f);
  Backend* be_ = nullptr;
  Tensor logits_;
};

}  // namespace trillion
