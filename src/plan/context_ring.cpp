// See context_ring.h for the derivation.
#include "plan/context_ring.h"

#include <algorithm>

namespace trillion::plan {

RingBytes context_ring_bytes(int64_t cp, uint64_t block_bytes) {
  if (cp <= 1) return {};
  const uint64_t c = static_cast<uint64_t>(cp);
  return {(c - 1) * block_bytes, (2 * c - 1) * block_bytes};
}

int64_t context_ring_block_bytes(const ModelSpec& m, int64_t batch, int64_t seq_len, int64_t elem,
                                 const TensorSplit& split) {
  const int64_t heads = m.is_mla() ? m.n_heads : m.n_kv_heads;
  const int64_t local = heads % split.tp == 0 ? heads / split.tp : heads;
  return batch * (seq_len / split.cp) * local * (m.qk_dim() + m.v_dim()) * elem;
}

int64_t context_ring_buffer_bytes(const ModelSpec& m, int64_t batch, int64_t seq_len, int64_t elem,
                                  const TensorSplit& split) {
  if (split.cp <= 1) return 0;
  return 5 * context_ring_block_bytes(m, batch, seq_len, elem, split);
}

RingSeconds context_ring_exposed_seconds(int64_t cp, double block_bytes, const LinkCost& link,
                                         double attention_forward, double attention_backward) {
  if (cp <= 1) return {};
  const double n = static_cast<double>(cp);
  const double f = attention_forward / n, b = attention_backward / n;
  auto exposed = [](double hop, double kernels) { return std::max(0.0, hop - kernels); };
  const double one = p2p_seconds(link, block_bytes), two = p2p_seconds(link, 2 * block_bytes);
  RingSeconds r;
  r.forward = (n - 1) * exposed(one, f);
  r.backward = 2 * exposed(one, b) + (n - 2) * exposed(two, b) + one;
  return r;
}

}  // namespace trillion::plan
