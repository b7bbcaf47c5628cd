// See local_shape.h.
#include "model/local_shape.h"

#include <fmt/format.h>

#include "core/error.h"

namespace trillion {

namespace {
int64_t divide(int64_t size, int degree, const char* degree_name, const char* size_name) {
  if (degree < 1) throw Error(fmt::format("parallel.{} = {} must be >= 1", degree_name, degree));
  if (size % degree != 0) {
    throw Error(fmt::format("parallel.{} = {} does not divide {} = {}; choose a {} that divides it",
                            degree_name, degree, size_name, size, degree_name));
  }
  return size / degree;
}
}  // namespace

LocalShape local_shape(const ModelConfig& c, int64_t batch, int64_t seq_len,
                       const ShardDegrees& d) {
  if (batch <= 0 || seq_len <= 0 || seq_len > c.seq_len) {
    throw Error(
        fmt::format("micro-batch shape [{}, {}] invalid: need batch >= 1 and 1 <= seq_len "
                    "<= model.seq_len = {}",
                    batch, seq_len, c.seq_len));
  }
  LocalShape s;
  s.batch = batch;
  s.seq = divide(seq_len, d.cp, "cp", "the sequence length");
  s.d_model = c.d_model;
  s.heads = divide(c.n_heads, d.tp, "tp", "model.n_heads");
  s.kv_heads = divide(c.n_kv_heads, d.tp, "tp", "model.n_kv_heads");
  s.head_dim = c.head_dim;
  s.value_dim = c.value_dim();
  s.rope_dim = c.rope_dim();
  s.ffn = divide(c.ffn_hidden, d.tp, "tp", "model.ffn_hidden");
  s.vocab_rows = divide(c.vocab_size, d.tp, "tp", "model.vocab_size");
  s.experts = 0;
  if (d.ep != 1) divide(0, d.ep, "ep", "the routed experts");  // dense: only ep = 1 is valid
  return s;
}

}  // namespace trillion
