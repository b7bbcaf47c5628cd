// CachedDecoder: one-token-at-a-time inference of a dense model with a key/value cache, for
// generation. step(token) runs the token at the next position through every layer with the
// backend's own per-token kernels (RMSNorm, RoPE, SwiGLU, GEMMs), appends its rotated keys and its
// values to the cache and returns the next-token logits, so a prompt of n tokens costs n steps
// and each new token one step (O(position) attention), instead of the full-window forward's whole
// [T] recomputation per token. Invariants: positions run 0 .. seq_len-1 (step past seq_len is an
// internal error: the caller starts a new window); the logits equal the full-window forward's at
// that position to rounding (same kernels except the attention sum order), tested token for token
// in tests/interop. Reads the parameters in place (a Buffer in the table's layout); dense only.
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

 private:
  Tensor param(const std::string& name) const { return table_.view(params_, name); }

  ModelConfig config_;
  const TensorTable& table_;
  const Buffer& params_;
  Backend& be_;
  int64_t position_ = 0;
  Buffer cos_sin_;   // [T, HD]: cos | sin per position, as the stage model's table
  Buffer k_cache_;   // [L, T, KV*HD] keys after RoPE
  Buffer v_cache_;   // [L, T, KV*HD]
  Buffer work_;      // per-token activations
  Tensor x_, normed_, rstd_, qkv_, heads_, gate_up_, act_, scores_, logits_;
};

}  // namespace trillion
