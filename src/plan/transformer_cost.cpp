// See transformer_cost.h.
#include "plan/transformer_cost.h"

namespace trillion::plan {

ParameterCount count_parameters(const DenseShape& s) {
  ParameterCount p;
  const int64_t C = s.d_model, HD = s.head_dim;
  const int64_t attention = C * (s.n_heads * HD)           // wq
                            + 2 * C * (s.n_kv_heads * HD)  // wk, wv
                            + (s.n_heads * HD) * C;        // wo
  const int64_t mlp = 3 * C * s.ffn_hidden;                // w_gate, w_up, w_down
  const int64_t norms = 2 * C;
  p.embedding = s.vocab * C;
  p.per_layer = attention + mlp + norms;
  p.head = (s.tied_embeddings ? 0 : s.vocab * C) + C;
  p.total = p.embedding + s.n_layers * p.per_layer + p.head;
  p.non_embedding = s.n_layers * p.per_layer + s.vocab * C + C;
  return p;
}

double training_flops_per_token(const DenseShape& s, int64_t seq_len) {
  const ParameterCount p = count_parameters(s);
  // Norm weights do no matmul; count only the matrices.
  const double matmul_params =
      static_cast<double>(p.non_embedding - s.n_layers * 2 * s.d_model - s.d_model);
  const double attention = 12.0 * s.n_layers * (s.n_heads * s.head_dim) * seq_len;
  return 6.0 * matmul_params + attention;
}

ModelStateBytes model_state_bytes(int64_t params, int param_bytes, int grad_bytes,
                                  int optimizer_bytes_per_param) {
  return {params * param_bytes, params * grad_bytes, params * optimizer_bytes_per_param};
}

}  // namespace trillion::plan
