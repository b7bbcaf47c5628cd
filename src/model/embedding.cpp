// See embedding.h.
#include "model/embedding.h"

#include "parallel/tensor_comm.h"

namespace trillion {

void Embedding::forward(Tensor out, const int32_t* tokens, const Tensor& weight,
                        const Tensor& full) {
  if (ctx_.tp_size() == 1) {
    be_.embedding_forward(out, tokens, weight);
  } else if (!ctx_.sequence_parallel()) {
    be_.vocab_embedding_forward(out, tokens, weight, first_row());
    parallel::reduce_from_tp_forward(ctx_.tp, out);
  } else {
    be_.vocab_embedding_forward(full, tokens, weight, first_row());
    parallel::reduce_scatter_sp_forward(ctx_.tp, full, out);
  }
}

void Embedding::backward_weight(Tensor dweight, const int32_t* tokens, const Tensor& dout,
                                const Tensor& full) {
  if (ctx_.tp_size() == 1) {
    be_.embedding_backward_weight(dweight, tokens, dout);
  } else if (!ctx_.sequence_parallel()) {
    parallel::reduce_from_tp_backward(ctx_.tp, dout);
    be_.vocab_embedding_backward_weight(dweight, tokens, dout, first_row());
  } else {
    parallel::reduce_scatter_sp_backward(ctx_.tp, dout, full);
    be_.vocab_embedding_backward_weight(dweight, tokens, full, first_row());
  }
}

}  // namespace trillion
