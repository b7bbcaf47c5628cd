// See lm_head.h.
#include "model/lm_head.h"

#include <algorithm>
#include <cmath>

#include "model/linear_gemm.h"
#include "parallel/tensor_comm.h"

namespace trillion {

namespace {
constexpr int64_t kHeadRowBlock = 256;  // rows of logits materialised at once
}  // namespace

LmHeadActivations LmHead::carve(Carver& kept) const {
  const int64_t N = ctx_.shape.tokens(), Nr = ctx_.residual_tokens(), C = ctx_.shape.d_model;
  LmHeadActivations a;
  a.normed = kept.take({Nr, C});
  a.rstd = kept.take({Nr});
  if (ctx_.sequence_parallel()) a.normed_full = kept.take({N, C});
  a.lse = kept.take({N});
  a.losses = kept.take({N});
  return a;
}

void LmHead::head_gemm(precision::GemmPass pass, Tensor C, bool ta, bool tb, const Tensor& A,
                       const Tensor& B, double beta) {
  if (ctx_.precision != nullptr && ctx_.precision->head_in_bf16()) {
    ctx_.precision->head_gemm(be_, pass, C, ta, tb, A, B, 1.0, beta);
  } else {
    be_.gemm(C, ta, tb, A, B, 1.0, beta);
  }
}

Tensor LmHead::carve_logits(Carver& workspace) const {
  return workspace.take({std::min(ctx_.shape.tokens(), kHeadRowBlock), ctx_.shape.vocab_rows});
}

void LmHead::forward(const Tensor& x, const LmHeadWeights& w, const LmHeadActivations& a,
                     const int32_t* targets) {
  be_.rmsnorm_forward(a.normed, a.rstd, x, w.final_norm, eps_);
  if (ctx_.sequence_parallel()) parallel::all_gather_sp_forward(ctx_.tp, a.normed, a.normed_full);
  const Tensor& in = gemm_input(a);
  const bool vocab_parallel = ctx_.tp_size() > 1;
  const int64_t N = in.size(0), R = logits_.size(0);
  if (vocab_parallel) stats_.assign(3 * N, 0.0);
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    const int64_t r1 = std::min(N, r0 + R);
    Tensor logits = logits_.rows(0, r1 - r0);
    head_gemm(precision::GemmPass::forward, logits, false, true, in.rows(r0, r1), w.head, 0.0);
    if (vocab_parallel) {
      be_.vocab_cross_entropy_forward(Tensor(stats_.data() + 3 * r0, DType::f64, {r1 - r0, 3}),
                                      logits, targets + r0, ctx_.tp_rank() * ctx_.shape.vocab_rows);
    } else {
      be_.cross_entropy_forward(a.losses.rows(r0, r1), a.lse.rows(r0, r1), logits, targets + r0);
    }
  }
  if (vocab_parallel) reduce_vocab_shards(a, targets);
}

void LmHead::reduce_vocab_shards(const LmHeadActivations& a, const int32_t* targets) {
  // lse = M + log sum_r s_r exp(m_r - M), M = max_r m_r; loss = lse - the target's logit (held by
  // one shard, 0 on the others).
  const int64_t N = static_cast<int64_t>(stats_.size() / 3);
  std::vector<double> max(N), sums(2 * N), lse(N), losses(N);
  for (int64_t n = 0; n < N; ++n) max[n] = stats_[3 * n];
  ctx_.tp->all_reduce(Tensor(max.data(), DType::f64, {N}), comm::ReduceOp::max);
  for (int64_t n = 0; n < N; ++n) {
    sums[2 * n] = stats_[3 * n + 1] * std::exp(stats_[3 * n] - max[n]);
    sums[2 * n + 1] = stats_[3 * n + 2];
  }
  ctx_.tp->all_reduce(Tensor(sums.data(), DType::f64, {2 * N}));
  for (int64_t n = 0; n < N; ++n) {
    lse[n] = max[n] + std::log(sums[2 * n]);
    losses[n] = targets[n] == kIgnoredTarget ? 0.0 : lse[n] - sums[2 * n + 1];
  }
  be_.copy(a.lse, Tensor(lse.data(), DType::f64, {N}));
  be_.copy(a.losses, Tensor(losses.data(), DType::f64, {N}));
}

void LmHead::logits_backward(Tensor dlogits, const Tensor& lse, const int32_t* targets,
                             double grad_scale) {
  if (ctx_.tp_size() > 1) {
    be_.vocab_cross_entropy_backward(dlogits, lse, targets, ctx_.tp_rank() * ctx_.shape.vocab_rows,
                                     grad_scale);
  } else {
    be_.cross_entropy_backward(dlogits, lse, targets, grad_scale);
  }
}

void LmHead::reduce_d_normed(Tensor d_normed) {
  if (ctx_.sequence_parallel()) {
    parallel::all_gather_sp_backward(ctx_.tp, partial_, d_normed);
  } else {
    parallel::copy_to_tp_backward(ctx_.tp, d_normed);
  }
}

template <typename F>
void LmHead::for_each_dlogits_block(const Tensor& normed, const Tensor& head, const Tensor& lse,
                                    const int32_t* targets, double grad_scale, F&& f) {
  const int64_t N = normed.size(0), R = logits_.size(0);
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    const int64_t r1 = std::min(N, r0 + R);
    Tensor dlogits = logits_.rows(0, r1 - r0);
    head_gemm(precision::GemmPass::forward, dlogits, false, true, normed.rows(r0, r1), head, 0.0);
    logits_backward(dlogits, lse.rows(r0, r1), targets + r0, grad_scale);
    f(r0, r1, dlogits);
  }
}

void LmHead::backward(Tensor dx, Tensor d_normed, const LmHeadWeights& d, const Tensor& x,
                      const LmHeadWeights& w, const LmHeadActivations& a, const int32_t* targets,
                      double grad_scale) {
  const Tensor& in = gemm_input(a);
  const Tensor d_in = d_normed_target(d_normed);
  for_each_dlogits_block(
      in, w.head, a.lse, targets, grad_scale, [&](int64_t r0, int64_t r1, const Tensor& dlogits) {
        head_gemm(precision::GemmPass::dgrad, d_in.rows(r0, r1), false, false, dlogits, w.head,
                  0.0);
        head_gemm(precision::GemmPass::wgrad, d.head, true, false, dlogits, in.rows(r0, r1), 1.0);
      });
  reduce_d_normed(d_normed);
  be_.rmsnorm_backward_input(dx, d_normed, x, w.final_norm, a.rstd);
  be_.rmsnorm_backward_weight(d.final_norm, d_normed, x, a.rstd);
}

void LmHead::backward_input(Tensor dx, Tensor d_normed, const Tensor& x, const LmHeadWeights& w,
                            const LmHeadActivations& a, const int32_t* targets, double grad_scale) {
  const Tensor d_in = d_normed_target(d_normed);
  for_each_dlogits_block(gemm_input(a), w.head, a.lse, targets, grad_scale,
                         [&](int64_t r0, int64_t r1, const Tensor& dlogits) {
                           head_gemm(precision::GemmPass::dgrad, d_in.rows(r0, r1), false, false,
                                     dlogits, w.head, 0.0);
                         });
  reduce_d_normed(d_normed);
  be_.rmsnorm_backward_input(dx, d_normed, x, w.final_norm, a.rstd);
}

void LmHead::backward_weight(const LmHeadWeights& d, const Tensor& d_normed, const Tensor& x,
                             const LmHeadWeights& w, const LmHeadActivations& a,
                             const int32_t* targets, double grad_scale) {
  // Same order of accumulation into each gradient as backward(), so results are bitwise equal.
  const Tensor& in = gemm_input(a);
  for_each_dlogits_block(
      in, w.head, a.lse, targets, grad_scale, [&](int64_t r0, int64_t r1, const Tensor& dlogits) {
        head_gemm(precision::GemmPass::wgrad, d.head, true, false, dlogits, in.rows(r0, r1), 1.0);
      });
  be_.rmsnorm_backward_weight(d.final_norm, d_normed, x, a.rstd);
}

}  // namespace trillion
