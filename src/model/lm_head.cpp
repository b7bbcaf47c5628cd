// See lm_head.h.
#include "model/lm_head.h"

#include <algorithm>

namespace trillion {

namespace {
constexpr int64_t kHeadRowBlock = 256;  // rows of logits materialised at once
}  // namespace

LmHeadActivations LmHead::carve(Carver& kept) const {
  const int64_t N = ctx_.shape.tokens(), C = ctx_.shape.d_model;
  LmHeadActivations a;
  a.normed = kept.take({N, C});
  a.rstd = kept.take({N});
  a.lse = kept.take({N});
  a.losses = kept.take({N});
  return a;
}

Tensor LmHead::carve_logits(Carver& workspace) const {
  return workspace.take({std::min(ctx_.shape.tokens(), kHeadRowBlock), ctx_.shape.vocab_rows});
}

void LmHead::forward(const Tensor& x, const LmHeadWeights& w, const LmHeadActivations& a,
                     const int32_t* targets) {
  be_.rmsnorm_forward(a.normed, a.rstd, x, w.final_norm, eps_);
  const int64_t N = x.size(0), R = logits_.size(0);
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    const int64_t r1 = std::min(N, r0 + R);
    Tensor logits = logits_.rows(0, r1 - r0);
    be_.gemm(logits, false, true, a.normed.rows(r0, r1), w.head, 1.0, 0.0);
    be_.cross_entropy_forward(a.losses.rows(r0, r1), a.lse.rows(r0, r1), logits, targets + r0);
  }
}

template <typename F>
void LmHead::for_each_dlogits_block(const Tensor& normed, const Tensor& head, const Tensor& lse,
                                    const int32_t* targets, double grad_scale, F&& f) {
  const int64_t N = normed.size(0), R = logits_.size(0);
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    const int64_t r1 = std::min(N, r0 + R);
    Tensor dlogits = logits_.rows(0, r1 - r0);
    be_.gemm(dlogits, false, true, normed.rows(r0, r1), head, 1.0, 0.0);
    be_.cross_entropy_backward(dlogits, lse.rows(r0, r1), targets + r0, grad_scale);
    f(r0, r1, dlogits);
  }
}

void LmHead::backward(Tensor dx, Tensor d_normed, const LmHeadWeights& d, const Tensor& x,
                      const LmHeadWeights& w, const LmHeadActivations& a, const int32_t* targets,
                      double grad_scale) {
  for_each_dlogits_block(a.normed, w.head, a.lse, targets, grad_scale,
                         [&](int64_t r0, int64_t r1, const Tensor& dlogits) {
                           be_.gemm(d_normed.rows(r0, r1), false, false, dlogits, w.head, 1.0, 0.0);
                           be_.gemm(d.head, true, false, dlogits, a.normed.rows(r0, r1), 1.0, 1.0);
                         });
  be_.rmsnorm_backward_input(dx, d_normed, x, w.final_norm, a.rstd);
  be_.rmsnorm_backward_weight(d.final_norm, d_normed, x, a.rstd);
}

void LmHead::backward_input(Tensor dx, Tensor d_normed, const Tensor& x, const LmHeadWeights& w,
                            const LmHeadActivations& a, const int32_t* targets,
                            double grad_scale) {
  for_each_dlogits_block(a.normed, w.head, a.lse, targets, grad_scale,
                         [&](int64_t r0, int64_t r1, const Tensor& dlogits) {
                           be_.gemm(d_normed.rows(r0, r1), false, false, dlogits, w.head, 1.0, 0.0);
                         });
  be_.rmsnorm_backward_input(dx, d_normed, x, w.final_norm, a.rstd);
}

void LmHead::backward_weight(const LmHeadWeights& d, const Tensor& d_normed, const Tensor& x,
                             const LmHeadWeights& w, const LmHeadActivations& a,
                             const int32_t* targets, double grad_scale) {
  // Same order of accumulation into each gradient as backward(), so results are bitwise equal.
  for_each_dlogits_block(a.normed, w.head, a.lse, targets, grad_scale,
                         [&](int64_t r0, int64_t r1, const Tensor& dlogits) {
                           be_.gemm(d.head, true, false, dlogits, a.normed.rows(r0, r1), 1.0, 1.0);
                         });
  be_.rmsnorm_backward_weight(d.final_norm, d_normed, x, a.rstd);
}

}  // namespace trillion
