// CachedDecoder: one-token-at-a-time inference of a dense model with a key/value cache, for
// generation. step(token) runs the token at the next position through every layer with the
// backend's own per-token kernels (RMSNorm, RoPE, SwiGLU, GEMMs), appends what the layer caches
// and returns the next-token logits, so a prompt of n tokens costs n steps and each new token
// one step (O(position) attention), instead of the full-window forward's whole [T] recomputation
// per token. What a layer caches per token:
//   grouped-query attention: its rotated keys and its values, 2 KV HD elements;
//   multi-head latent attention (model/mla.h): only the normed KV latent and the rotated shared
//     key, DC + DR elements (DeepSeek-V2 2405.04434 §2.1.2). The key and value up-projections are
//     absorbed: head h scores q_nope_h . (Wk_h c_t) = (Wk_h^T q_nope_h) . c_t, and its output is
//     Wv_h (sum_t p_t c_t), so no per-head key or value is ever formed.
// Invariants: positions run 0 .. seq_len-1 (step past seq_len is an internal error: the caller
// starts a new window); the logits equal the full-window forward's at that position to rounding
// (same kernels except the attention sum order and, for MLA, the absorption's), tested token for
// token in tests/interop. Reads the parameters in place (a Buffer in the table's layout); dense
// only.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/tensor_table.h"
#include "model/config.h"

namespace trillion {

class CachedDecoder {
 public:
  CachedDecoder(const ModelConfig& config, const TensorTable& table, const Buffer& params,
                Backend& backend, MemoryTracker& tracker);

  void reset() { position_ = 0; }
  int64_t position() const { return position_; }
  // Next-token logits [V] (in the model dtype) after feeding `token` at position().
  const Tensor& step(int32_t token);
  // Bytes the cache holds per token, all layers (GQA: 2 KV HD; MLA: DC + DR elements per layer).
  int64_t cache_bytes_per_token() const;

 private:
  Tensor param(const std::string& name) const { return table_.view(params_, name); }
  // The attention sublayer of layer l at position pos: x_ += Wo · attention(normed_).
  void attend_gqa(int64_t l, int64_t pos, const std::string& p, const Tensor& cs);
  void attend_mla(int64_t l, int64_t pos, const std::string& p, const Tensor& cs);

  ModelConfig config_;
  const TensorTable& table_;
  const Buffer& params_;
  Backend& be_;
  int64_t position_ = 0;
  Buffer cos_sin_;  // [T, rope_dim]: cos | sin per position, as the stage model's table
  // GQA: [L, T, KV*HD] keys after RoPE and values. MLA: [L, T, DC] normed latents and [L, T, DR]
  // rotated shared keys.
  Buffer k_cache_, v_cache_;
  Buffer work_;  // per-token activations
  Tensor x_, normed_, rstd_, qkv_, heads_, gate_up_, act_, scores_, logits_;
  Tensor cq_, q_abs_,
      context_;  // MLA: [2 DQ] query latent | its norm, [NH*DC] absorbed queries, contexts
};

}  // namespace trillion
