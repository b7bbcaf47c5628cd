// MLP module: the SwiGLU feed-forward sublayer of a block (Shazeer 2002.05202), from the normed
// input to the residual add: out += Wdown · (silu(Wgate · x) * (Wup · x)), over this rank's F/tp
// hidden columns. Wgate and Wup are one [2F, C] matrix (one GEMM). See model/glossary.h.
#pragma once

#include "model/carver.h"
#include "model/parallel_context.h"

namespace trillion {

struct MlpWeights {    // parameters or their gradients (same layout)
  Tensor w_gate_up;    // [2F, C]: w_gate | w_up stored back to back
  Tensor w_down;       // [C, F]
  int64_t layer = -1;  // the global block (as AttentionWeights::layer)
};

struct MlpActivations {  // saved by forward for backward
  Tensor gate_up;        // [N, 2F] SwiGLU's input
  Tensor act;            // [N, F] SwiGLU output (w_down's input)
};

struct MlpStash {    // kept from backward_input for backward_weight
  Tensor d_gate_up;  // [N, 2F]
};

class Mlp {
 public:
  // width: the hidden width F this rank computes (0: the model's, ctx.shape.ffn; a MoE layer's
  // shared experts use theirs).
  Mlp(Backend& backend, const ParallelContext& ctx, int64_t width = 0)
      : be_(backend), ctx_(ctx), width_(width) {}
  int64_t width() const { return width_ > 0 ? width_ : ctx_.shape.ffn; }

  // gate_up from `kept`, act from `core` (recomputed under selective recompute).
  MlpActivations carve(Carver& kept, Carver& core) const;
  MlpStash carve_stash(Carver& c) const;
  Tensor carve_scratch(Carver& c) const;  // d_act [N, F]

  // out[N, C] += Wdown · swiglu(Wgu · x); x [N, C] is the normed input. write_out = false stops
  // after the SwiGLU (full recompute: the block output still exists).
  void forward(Tensor out, const Tensor& x, const MlpWeights& w, const MlpActivations& a,
               bool write_out = true);
  void recompute_core(const MlpActivations& a);  // act from gate_up
  // dx[N, C] = dL/dx from dout = dL/d(out); fills the stash.
  void backward_input(Tensor dx, const Tensor& dout, const MlpWeights& w, const MlpActivations& a,
                      const MlpStash& stash, const Tensor& d_act);
  void backward_weight(const MlpWeights& grads, const Tensor& x, const Tensor& dout,
                       const MlpActivations& a, const MlpStash& stash);

 private:
  Backend& be_;
  const ParallelContext& ctx_;
  int64_t width_;
};

}  // namespace trillion
