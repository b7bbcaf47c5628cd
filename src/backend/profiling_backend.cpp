// See profiling_backend.h.
#include "backend/profiling_backend.h"

#include "core/timer.h"

namespace trillion {

template <typename F>
auto ProfilingBackend::timed(const char* op, double flops, F&& f) {
  Timer t;
  if constexpr (std::is_void_v<decltype(f())>) {
    f();
    OpProfile& p = ops_[op];
    p.seconds += t.seconds();
    ++p.calls;
    p.flops += flops;
  } else {
    auto r = f();
    OpProfile& p = ops_[op];
    p.seconds += t.seconds();
    ++p.calls;
    p.flops += flops;
    return r;
  }
}

namespace {
// 2 * (every element of C, batch included) * K.
double gemm_flops(const Tensor& C, bool ta, const Tensor& A) {
  const double K = static_cast<double>(ta ? A.size(A.rank() - 2) : A.size(A.rank() - 1));
  return 2.0 * static_cast<double>(C.numel()) * K;
}
}  // namespace

void ProfilingBackend::gemm(Tensor C, bool ta, bool tb, const Tensor& A, const Tensor& B,
                            double alpha, double beta) {
  timed("gemm", gemm_flops(C, ta, A), [&] { in_.gemm(C, ta, tb, A, B, alpha, beta); });
}
void ProfilingBackend::gemm_batched(Tensor C, bool ta, bool tb, const Tensor& A, const Tensor& B,
                                    double alpha, double beta) {
  timed("gemm_batched", gemm_flops(C, ta, A),
        [&] { in_.gemm_batched(C, ta, tb, A, B, alpha, beta); });
}
void ProfilingBackend::embedding_forward(Tensor out, const int32_t* tokens, const Tensor& table) {
  timed("embedding", 0, [&] { in_.embedding_forward(out, tokens, table); });
}
void ProfilingBackend::embedding_backward_weight(Tensor dtable, const int32_t* tokens,
                                                 const Tensor& dout) {
  timed("embedding", 0, [&] { in_.embedding_backward_weight(dtable, tokens, dout); });
}
void ProfilingBackend::rmsnorm_forward(Tensor out, Tensor rstd, const Tensor& x, const Tensor& w,
                                       double eps) {
  timed("rmsnorm", 0, [&] { in_.rmsnorm_forward(out, rstd, x, w, eps); });
}
void ProfilingBackend::rmsnorm_backward_input(Tensor dx, const Tensor& dout, const Tensor& x,
                                              const Tensor& w, const Tensor& rstd) {
  timed("rmsnorm", 0, [&] { in_.rmsnorm_backward_input(dx, dout, x, w, rstd); });
}
void ProfilingBackend::rmsnorm_backward_weight(Tensor dw, const Tensor& dout, const Tensor& x,
                                               const Tensor& rstd) {
  timed("rmsnorm", 0, [&] { in_.rmsnorm_backward_weight(dw, dout, x, rstd); });
}
void ProfilingBackend::rope_forward(Tensor qkv, const Tensor& cs, const AttentionShape& s) {
  timed("rope", 0, [&] { in_.rope_forward(qkv, cs, s); });
}
void ProfilingBackend::rope_backward(Tensor dqkv, const Tensor& cs, const AttentionShape& s) {
  timed("rope", 0, [&] { in_.rope_backward(dqkv, cs, s); });
}
void ProfilingBackend::attention_forward(Tensor out, Tensor probs, const Tensor& qkv,
                                         const AttentionShape& s) {
  timed("attention", 4.0 * s.B * s.NH * s.T * s.T * s.HD,
        [&] { in_.attention_forward(out, probs, qkv, s); });
}
void ProfilingBackend::attention_backward(Tensor dqkv, const Tensor& dout, const Tensor& qkv,
                                          const Tensor& probs, const AttentionShape& s) {
  timed("attention", 8.0 * s.B * s.NH * s.T * s.T * s.HD,
        [&] { in_.attention_backward(dqkv, dout, qkv, probs, s); });
}
void ProfilingBackend::flash_attention_forward(Tensor out, Tensor lse, const Tensor& qkv,
                                               const AttentionShape& s, AttentionBlocks b) {
  timed("attention", 4.0 * s.B * s.NH * s.T * s.T * s.HD,
        [&] { in_.flash_attention_forward(out, lse, qkv, s, b); });
}
void ProfilingBackend::flash_attention_backward(Tensor dqkv, const Tensor& dout, const Tensor& out,
                                                const Tensor& qkv, const Tensor& lse,
                                                const AttentionShape& s, AttentionBlocks b) {
  timed("attention", 8.0 * s.B * s.NH * s.T * s.T * s.HD,
        [&] { in_.flash_attention_backward(dqkv, dout, out, qkv, lse, s, b); });
}
void ProfilingBackend::swiglu_forward(Tensor out, const Tensor& gate_up) {
  timed("swiglu", 0, [&] { in_.swiglu_forward(out, gate_up); });
}
void ProfilingBackend::swiglu_backward(Tensor dgu, const Tensor& dout, const Tensor& gu) {
  timed("swiglu", 0, [&] { in_.swiglu_backward(dgu, dout, gu); });
}
void ProfilingBackend::cross_entropy_forward(Tensor losses, Tensor lse, const Tensor& logits,
                                             const int32_t* targets) {
  timed("cross_entropy", 0, [&] { in_.cross_entropy_forward(losses, lse, logits, targets); });
}
void ProfilingBackend::cross_entropy_backward(Tensor logits, const Tensor& lse,
                                              const int32_t* targets, double scale) {
  timed("cross_entropy", 0, [&] { in_.cross_entropy_backward(logits, lse, targets, scale); });
}
void ProfilingBackend::adamw_update(Tensor param, const Tensor& grad, Tensor m, Tensor v,
                                    const AdamWParams& p) {
  timed("adamw", 0, [&] { in_.adamw_update(param, grad, m, v, p); });
}
void ProfilingBackend::fill(Tensor x, double value) {
  timed("fill/copy/add/scale", 0, [&] { in_.fill(x, value); });
}
void ProfilingBackend::copy(Tensor dst, const Tensor& src) {
  timed("fill/copy/add/scale", 0, [&] { in_.copy(dst, src); });
}
void ProfilingBackend::add(Tensor y, const Tensor& x) {
  timed("fill/copy/add/scale", 0, [&] { in_.add(y, x); });
}
void ProfilingBackend::scale(Tensor x, double alpha) {
  timed("fill/copy/add/scale", 0, [&] { in_.scale(x, alpha); });
}
double ProfilingBackend::sum_squares(const Tensor& x) {
  return timed("sum_squares", 0, [&] { return in_.sum_squares(x); });
}

}  // namespace trillion
