// The Backend's operations, declared once. Each entry is
//   X(return type, name, profile group, (parameters), (arguments))
// and expands into the pure virtual interface (backend.h), every implementation's overrides
// (TRILLION_BACKEND_OVERRIDES) and the profiling decorator's timed forwarders, so adding an op is
// one edit here plus its kernels. The contracts of each op are documented in backend.h (the
// attention ops: qkv rows Q [NH*HD] | K [KV*HD] | V [KV*VD], outputs [NH*VD], kv = K | V).
#pragma once

#define TRILLION_BACKEND_OPS(X)                                                                    \
  X(void, gemm, "gemm",                                                                            \
    (Tensor C, bool trans_a, bool trans_b, const Tensor& A, const Tensor& B, double alpha,         \
     double beta),                                                                                 \
    (C, trans_a, trans_b, A, B, alpha, beta))                                                      \
  X(void, gemm_batched, "gemm_batched",                                                            \
    (Tensor C, bool trans_a, bool trans_b, const Tensor& A, const Tensor& B, double alpha,         \
     double beta),                                                                                 \
    (C, trans_a, trans_b, A, B, alpha, beta))                                                      \
  X(void, embedding_forward, "embedding",                                                          \
    (Tensor out, const int32_t* tokens, const Tensor& table), (out, tokens, table))                \
  X(void, embedding_backward_weight, "embedding",                                                  \
    (Tensor dtable, const int32_t* tokens, const Tensor& dout), (dtable, tokens, dout))            \
  X(void, vocab_embedding_forward, "embedding",                                                    \
    (Tensor out, const int32_t* tokens, const Tensor& rows, int64_t first),                        \
    (out, tokens, rows, first))                                                                    \
  X(void, vocab_embedding_backward_weight, "embedding",                                            \
    (Tensor drows, const int32_t* tokens, const Tensor& dout, int64_t first),                      \
    (drows, tokens, dout, first))                                                                  \
  X(void, rmsnorm_forward, "rmsnorm",                                                              \
    (Tensor out, Tensor rstd, const Tensor& x, const Tensor& w, double eps),                       \
    (out, rstd, x, w, eps))                                                                        \
  X(void, rmsnorm_backward_input, "rmsnorm",                                                       \
    (Tensor dx, const Tensor& dout, const Tensor& x, const Tensor& w, const Tensor& rstd),         \
    (dx, dout, x, w, rstd))                                                                        \
  X(void, rmsnorm_backward_weight, "rmsnorm",                                                      \
    (Tensor dw, const Tensor& dout, const Tensor& x, const Tensor& rstd), (dw, dout, x, rstd))     \
  X(void, rope_forward, "rope", (Tensor qkv, const Tensor& cos_sin, const AttentionShape& s),      \
    (qkv, cos_sin, s))                                                                             \
  X(void, rope_backward, "rope", (Tensor dqkv, const Tensor& cos_sin, const AttentionShape& s),    \
    (dqkv, cos_sin, s))                                                                            \
  X(void, attention_forward, "attention",                                                          \
    (Tensor out, Tensor probs, const Tensor& qkv, const AttentionShape& s), (out, probs, qkv, s))  \
  X(void, attention_backward, "attention",                                                         \
    (Tensor dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& probs,                      \
     const AttentionShape& s),                                                                     \
    (dqkv, dout, qkv, probs, s))                                                                   \
  X(void, flash_attention_forward, "attention",                                                    \
    (Tensor out, Tensor lse, const Tensor& qkv, const AttentionShape& s, AttentionBlocks blocks),  \
    (out, lse, qkv, s, blocks))                                                                    \
  X(void, flash_attention_backward, "attention",                                                   \
    (Tensor dqkv, const Tensor& dout, const Tensor& out, const Tensor& qkv, const Tensor& lse,     \
     const AttentionShape& s, AttentionBlocks blocks),                                             \
    (dqkv, dout, out, qkv, lse, s, blocks))                                                        \
  X(void, flash_attention_block_forward, "attention",                                              \
    (Tensor out, Tensor lse, const Tensor& q, const Tensor& kv, const AttentionShape& s,           \
     AttentionSpan queries, AttentionSpan keys, AttentionBlocks blocks),                           \
    (out, lse, q, kv, s, queries, keys, blocks))                                                   \
  X(void, flash_attention_block_backward, "attention",                                             \
    (Tensor dq, Tensor dkv, const Tensor& dout, const Tensor& out, const Tensor& q,                \
     const Tensor& kv, const Tensor& lse, const AttentionShape& s, AttentionSpan queries,          \
     AttentionSpan keys, AttentionBlocks blocks),                                                  \
    (dq, dkv, dout, out, q, kv, lse, s, queries, keys, blocks))                                    \
  X(void, swiglu_forward, "swiglu", (Tensor out, const Tensor& gate_up), (out, gate_up))           \
  X(void, swiglu_backward, "swiglu", (Tensor dgate_up, const Tensor& dout, const Tensor& gate_up), \
    (dgate_up, dout, gate_up))                                                                     \
  X(void, cross_entropy_forward, "cross_entropy",                                                  \
    (Tensor losses, Tensor lse, const Tensor& logits, const int32_t* targets),                     \
    (losses, lse, logits, targets))                                                                \
  X(void, cross_entropy_backward, "cross_entropy",                                                 \
    (Tensor logits, const Tensor& lse, const int32_t* targets, double scale),                      \
    (logits, lse, targets, scale))                                                                 \
  X(void, vocab_cross_entropy_forward, "cross_entropy",                                            \
    (Tensor stats, const Tensor& logits, const int32_t* targets, int64_t first),                   \
    (stats, logits, targets, first))                                                               \
  X(void, vocab_cross_entropy_backward, "cross_entropy",                                           \
    (Tensor logits, const Tensor& lse, const int32_t* targets, int64_t first, double scale),       \
    (logits, lse, targets, first, scale))                                                          \
  X(void, adamw_update, "adamw",                                                                   \
    (Tensor param, const Tensor& grad, Tensor m, Tensor v, const AdamWParams& p),                  \
    (param, grad, m, v, p))                                                                        \
  X(void, fill, "fill/copy/add/scale", (Tensor x, double value), (x, value))                       \
  X(void, copy, "fill/copy/add/scale", (Tensor dst, const Tensor& src), (dst, src))                \
  X(void, add, "fill/copy/add/scale", (Tensor y, const Tensor& x), (y, x))                         \
  X(void, scale, "fill/copy/add/scale", (Tensor x, double alpha), (x, alpha))                      \
  X(double, sum_squares, "sum_squares", (const Tensor& x), (x))

// Declares every op as an override, inside an implementation's class body.
#define TRILLION_BACKEND_DECLARE_OVERRIDE(ret, name, group, params, args) ret name params override;
#define TRILLION_BACKEND_OVERRIDES TRILLION_BACKEND_OPS(TRILLION_BACKEND_DECLARE_OVERRIDE)
