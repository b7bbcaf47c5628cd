// See mlp.h.
#include "model/mlp.h"

#include "model/linear_gemm.h"

namespace trillion {

using precision::GemmPass;

MlpActivations Mlp::carve(Carver& kept, Carver& core) const {
  const int64_t N = ctx_.shape.tokens(), F = width();
  MlpActivations a;
  a.gate_up = kept.take({N, 2 * F});
  a.act = core.take({N, F});
  return a;
}

MlpStash Mlp::carve_stash(Carver& c) const {
  return {c.take({ctx_.shape.tokens(), 2 * width()})};
}

Tensor Mlp::carve_scratch(Carver& c) const {
  return c.take({ctx_.shape.tokens(), width()});
}

void Mlp::recompute_core(const MlpActivations& a) {
  be_.swiglu_forward(a.act, a.gate_up);
}

void Mlp::forward(Tensor out, const Tensor& x, const MlpWeights& w, const MlpActivations& a,
                  bool write_out) {
  linear_gemm(ctx_, w.layer, be_, GemmPass::forward, a.gate_up, false, true, x, w.w_gate_up, 1.0,
              0.0);
  recompute_core(a);
  if (write_out)
    linear_gemm(ctx_, w.layer, be_, GemmPass::forward, out, false, true, a.act, w.w_down, 1.0, 1.0);
}

void Mlp::backward_input(Tensor dx, const Tensor& dout, const MlpWeights& w,
                         const MlpActivations& a, const MlpStash& g, const Tensor& d_act) {
  linear_gemm(ctx_, w.layer, be_, GemmPass::dgrad, d_act, false, false, dout, w.w_down, 1.0, 0.0);
  be_.swiglu_backward(g.d_gate_up, d_act, a.gate_up);
  linear_gemm(ctx_, w.layer, be_, GemmPass::dgrad, dx, false, false, g.d_gate_up, w.w_gate_up, 1.0,
              0.0);
}

void Mlp::backward_weight(const MlpWeights& d, const Tensor& x, const Tensor& dout,
                          const MlpActivations& a, const MlpStash& g) {
  linear_gemm(ctx_, d.layer, be_, GemmPass::wgrad, d.w_down, true, false, dout, a.act, 1.0, 1.0);
  linear_gemm(ctx_, d.layer, be_, GemmPass::wgrad, d.w_gate_up, true, false, g.d_gate_up, x, 1.0,
              1.0);
}

}  // namespace trillion
