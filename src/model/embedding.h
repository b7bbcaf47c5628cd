// Embedding module: out[N, C] = table[tokens], the first stage's input. Tokens are not
// differentiable, so there is no backward_input; backward_weight scatters dL/d(out) into the
// table's gradient (+=). See model/glossary.h.
#pragma once

#include "model/parallel_context.h"

namespace trillion {

class Embedding {
 public:
  Embedding(Backend& backend, const ParallelContext& ctx) : be_(backend), ctx_(ctx) {}
  // out [N, C]; weight [V, C].
  void forward(Tensor out, const int32_t* tokens, const Tensor& weight);
  // dweight [V, C] += scatter of dout [N, C] by tokens.
  void backward_weight(Tensor dweight, const int32_t* tokens, const Tensor& dout);

 private:
  Backend& be_;
  const ParallelContext& ctx_;
};

}  // namespace trillion
