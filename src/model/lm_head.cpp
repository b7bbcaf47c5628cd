// See lm_head.h.
#include "model/lm_head.h"

#include <algorithm>

namespace trillion {

void LmHeadLoss::forward(Tensor losses, Tensor lse, const Tensor& x, const Tensor& w,
                         const int32_t* targets) {
  const int64_t N = x.size(0), R = logits_.size(0);
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    const int64_t r1 = std::min(N, r0 + R);
    Tensor logits = logits_.rows(0, r1 - r0);
    be_->gemm(logits, false, true, x.rows(r0, r1), w, 1.0, 0.0);
    be_->cross_entropy_forward(losses.rows(r0, r1), lse.rows(r0, r1), logits, targets + r0);
  }
}

template <typename F>
void LmHeadLoss::for_each_dlogits_block(const Tensor& x, const Tensor& w, const Tensor& lse,
                                        const int32_t* targets, double grad_scale, F&& f) {
  const int64_t N = x.size(0), R = logits_.size(0);
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    const int64_t r1 = std::min(N, r0 + R);
    Tensor dlogits = logits_.rows(0, r1 - r0);
    be_->gemm(dlogits, false, true, x.rows(r0, r1), w, 1.0, 0.0);
    be_->cross_entropy_backward(dlogits, lse.rows(r0, r1), targets + r0, grad_scale);
    f(r0, r1, dlogits);
  }
}

void LmHeadLoss::backward(Tensor dx, Tensor dw, const Tensor& x, const Tensor& w, const Tensor& lse,
                          const int32_t* targets, double grad_scale) {
  for_each_dlogits_block(x, w, lse, targets, grad_scale,
                         [&](int64_t r0, int64_t r1, const Tensor& dlogits) {
                           be_->gemm(dx.rows(r0, r1), false, false, dlogits, w, 1.0, 0.0);
                           be_->gemm(dw, true, false, dlogits, x.rows(r0, r1), 1.0, 1.0);
                         });
}

void LmHeadLoss::backward_input(Tensor dx, const Tensor& x, const Tensor& w, const Tensor& lse,
                                const int32_t* targets, double grad_scale) {
  for_each_dlogits_block(x, w, lse, targets, grad_scale,
                         [&](int64_t r0, int64_t r1, const Tensor& dlogits) {
                           be_->gemm(dx.rows(r0, r1), false, false, dlogits, w, 1.0, 0.0);
                         });
}

void LmHeadLoss::backward_weight(Tensor dw, const Tensor& x, const Tensor& w, const Tensor& lse,
                                 const int32_t* targets, double grad_scale) {
  for_each_dlogits_block(x, w, lse, targets, grad_scale,
                         [&](int64_t r0, int64_t r1, const Tensor& dlogits) {
                           be_->gemm(dw, true, false, dlogits, x.rows(r0, r1), 1.0, 1.0);
                         });
}

}  // namespace trillion
