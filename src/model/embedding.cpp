// See embedding.h.
#include "model/embedding.h"

namespace trillion {

void Embedding::forward(Tensor out, const int32_t* tokens, const Tensor& weight) {
  be_.embedding_forward(out, tokens, weight);
}

void Embedding::backward_weight(Tensor dweight, const int32_t* tokens, const Tensor& dout) {
  be_.embedding_backward_weight(dweight, tokens, dout);
}

}  // namespace trillion
