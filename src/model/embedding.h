// Embedding module: out[N, C] = table[tokens], the first stage's input. Tokens are not
// differentiable, so there is no backward_input; backward_weight scatters dL/d(out) into the
// table's gradient (+=). See model/glossary.h.
//
// Vocabulary-parallel under tp (Megatron-LM 1909.08053 §3): this rank holds vocabulary rows
// [r V/tp, (r+1) V/tp); each rank looks up the tokens in its rows (zeros for the others) into a
// partial [N, C], and the tp group sums it: reduce_from_tp (all-reduce) into out[N, C], or under
// sequence parallelism reduce_scatter_sp into this rank's out[N/tp, C] rows. Backward is the
// partner: the whole dL/d(out) (under SP gathered from the slices) scattered into this rank's rows.
#pragma once

#include "model/parallel_context.h"

namespace trillion {

class Embedding {
 public:
  Embedding(Backend& backend, const ParallelContext& ctx) : be_(backend), ctx_(ctx) {}
  // out [N, C] (SP: [N/tp, C]); weight [V/tp, C]. full [N, C]: scratch under SP (else unused).
  void forward(Tensor out, const int32_t* tokens, const Tensor& weight, const Tensor& full = {});
  // dweight [V/tp, C] += scatter of dout [N, C] (SP: [N/tp, C], gathered into `full` first).
  void backward_weight(Tensor dweight, const int32_t* tokens, const Tensor& dout,
                       const Tensor& full = {});

 private:
  int64_t first_row() const { return ctx_.tp_rank() * ctx_.shape.vocab_rows; }
  Backend& be_;
  const ParallelContext& ctx_;
};

}  // namespace trillion
