// LocalShape: the sizes of one rank's share of a layer — the one function every buffer size of
// the model comes from. With every degree 1 it is the whole model (the one-process run).
//   T_local = T / cp            (context parallelism: a slice of each sequence)
//   heads   = NH / tp, kv_heads = KV / tp   (tensor parallelism splits attention by heads)
//   ffn     = F / tp            (and the MLP by its hidden width)
//   vocab_rows = V / tp         (vocabulary-parallel embedding and head)
//   experts = E / ep            (expert parallelism)
// Invariant: local_shape() throws Error naming the degree and the size it does not divide, so an
// impossible layout is refused before any allocation.
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "model/config.h"

namespace trillion {

// The degrees that cut a layer's tensors (pp and dp cut the model and the batch elsewhere).
struct ShardDegrees {
  int tp = 1, cp = 1, ep = 1;
};

struct LocalShape {
  int64_t batch = 0;       // B: sequences of one micro-batch on this rank
  int64_t seq = 0;         // T_local
  int64_t d_model = 0;     // C
  int64_t heads = 0;       // NH / tp
  int64_t kv_heads = 0;    // KV / tp
  int64_t head_dim = 0;    // HD (query/key head dim; MLA: qk_nope + qk_rope)
  int64_t value_dim = 0;   // VD (value head dim; = HD except under MLA)
  int64_t rope_dim = 0;    // the rotated width of a head (= HD except under MLA: qk_rope)
  int64_t ffn = 0;         // F / tp
  int64_t vocab_rows = 0;  // V / tp
  int64_t experts = 0;     // E / ep (0: dense model)
  int64_t tokens() const { return batch * seq; }                // N
  // Q [NH*HD] | K [KV*HD] | V [KV*VD]
  int64_t qkv_width() const { return (heads + kv_heads) * head_dim + kv_heads * value_dim; }
  int64_t attention_width() const { return heads * value_dim; }  // NH * VD
  AttentionShape attention() const { return {batch, seq, heads, kv_heads, head_dim, value_dim}; }
};

// batch, seq_len: the micro-batch this rank runs ([B, T] before cp splits T). config must be
// validated.
LocalShape local_shape(const ModelConfig& config, int64_t batch, int64_t seq_len,
                       const ShardDegrees& degrees = {});

}  // namespace trillion
