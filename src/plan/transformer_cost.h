// The cost model of a dense Llama-style decoder: parameter count, model FLOPs per token and the
// bytes of model state (parameters, gradients, optimizer moments). One place computes these
// numbers; the engine reports MFU from them and its tests assert that the bytes it allocates
// equal them exactly. plan/ depends on core/ only, so it has its own description of a model.
#pragma once

#include <cstdint>

namespace trillion::plan {

// Dimension letters as in the glossary: C d_model, L layers, NH heads, KV kv heads, HD head dim,
// F ffn width (SwiGLU: three C x F matrices), V vocab, T sequence length.
struct DenseShape {
  int64_t vocab = 0;       // V
  int64_t d_model = 0;     // C
  int64_t n_layers = 0;    // L
  int64_t n_heads = 0;     // NH
  int64_t n_kv_heads = 0;  // KV
  int64_t head_dim = 0;    // HD (usually C / NH)
  int64_t ffn_hidden = 0;  // F
  bool tied_embeddings = false;
};

struct ParameterCount {
  int64_t embedding = 0;  // V*C input embedding
  int64_t per_layer = 0;  // attention + MLP + 2 norms
  int64_t head = 0;       // V*C output head (0 when tied) + final norm C
  int64_t total = 0;      // embedding + L*per_layer + head
  // Parameters that do matrix FLOPs for every token: everything except the input embedding
  // lookup (a tied head still multiplies, so it is counted here).
  int64_t non_embedding = 0;
};

ParameterCount count_parameters(const DenseShape& s);

// Model FLOPs per token for a training step (forward + backward), PaLM convention (2204.02311
// App. B): 6 * N_matmul + 12 * L * (NH*HD) * T, where N_matmul counts every weight that does a
// matrix multiply per token (non-embedding + LM head) and the attention term assumes the full
// T x T score matrix (no halving for the causal mask). Recompute is not counted (that is HFU).
double training_flops_per_token(const DenseShape& s, int64_t seq_len);

// Bytes of model state per process without sharding: parameters, gradients and optimizer state
// (AdamW: two moments) at the given element sizes. Mixed-precision Adam (ZeRO 1910.02054 §3.1)
// is param 2 + grad 2 + optimizer 12 (fp32 master + 2 moments) = 16 bytes per parameter.
struct ModelStateBytes {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer = 0;
  int64_t total() const { return parameters + gradients + optimizer; }
};

ModelStateBytes model_state_bytes(int64_t params, int param_bytes, int grad_bytes,
                                  int optimizer_bytes_per_param);

}  // namespace trillion::plan
