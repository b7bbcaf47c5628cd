// See config.h.
#include "model/config.h"

#include <fmt/format.h>

#include "core/error.h"

namespace trillion {

void ModelConfig::validate() {
  auto positive = [](const char* key, int64_t v) {
    if (v <= 0) throw Error(fmt::format("model.{} must be positive, got {}", key, v));
  };
  positive("vocab_size", vocab_size);
  positive("d_model", d_model);
  positive("n_layers", n_layers);
  positive("n_heads", n_heads);
  positive("ffn_hidden", ffn_hidden);
  positive("seq_len", seq_len);
  if (n_kv_heads == 0) n_kv_heads = n_heads;
  positive("n_kv_heads", n_kv_heads);
  if (head_dim == 0) {
    if (d_model % n_heads != 0) {
      throw Error(fmt::format(
          "model.n_heads = {} does not divide model.d_model = {}; choose n_heads dividing "
          "d_model or set model.head_dim explicitly",
          n_heads, d_model));
    }
    head_dim = d_model / n_heads;
  }
  positive("head_dim", head_dim);
  if (head_dim % 2 != 0) {
    throw Error(fmt::format("model.head_dim = {} must be even for rotary embeddings", head_dim));
  }
  if (n_heads % n_kv_heads != 0) {
    throw Error(fmt::format(
        "model.n_kv_heads = {} must divide model.n_heads = {} (grouped-query attention)",
        n_kv_heads, n_heads));
  }
  if (vocab_size > (int64_t{1} << 31) - 1) {
    throw Error(fmt::format("model.vocab_size = {} exceeds 2^31 - 1", vocab_size));
  }
  if (!(rope_theta > 0)) throw Error(fmt::format("model.rope_theta must be > 0, got {}", rope_theta));
  if (!(norm_eps > 0)) throw Error(fmt::format("model.norm_eps must be > 0, got {}", norm_eps));
  if (!(init_std > 0)) throw Error(fmt::format("model.init_std must be > 0, got {}", init_std));
  if (dtype != DType::f32 && dtype != DType::f64) {
    throw Error(fmt::format("model.dtype = {}: the CPU engine computes in f32 or f64",
                            dtype_name(dtype)));
  }
}

plan::DenseShape ModelConfig::shape() const {
  plan::DenseShape s;
  s.vocab = vocab_size;
  s.d_model = d_model;
  s.n_layers = n_layers;
  s.n_heads = n_heads;
  s.n_kv_heads = n_kv_heads;
  s.head_dim = head_dim;
  s.ffn_hidden = ffn_hidden;
  s.tied_embeddings = tied_embeddings;
  return s;
}

}  // namespace trillion
