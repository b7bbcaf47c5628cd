// See context_ring.h for the derivation.
#include "plan/context_ring.h"

#include <algorithm>

namespace trillion::plan {

RingBytes context_ring_bytes(int64_t cp, uint64_t block_bytes) {
  if (cp <= 1) return {};
  const uint64_t c = static_cast<uint64_t>(cp);
  return {(c - 1) * block_bytes, (2 * c - 1) * block_bytes};
}

namespace {
int64_t local_heads(const ModelSpec& m, const TensorSplit& split) {
  const int64_t heads = m.is_mla() ? m.n_heads : m.n_kv_heads;
  return heads % split.tp == 0 ? heads / split.tp : heads;
}
// Per-token elements of one rank's per-head K/V block.
int64_t heads_width(const ModelSpec& m, const TensorSplit& split) {
  return local_heads(m, split) * (m.qk_dim() + m.v_dim());
}
}  // namespace

bool context_ring_latent(const ModelSpec& m, const TensorSplit& split, CpMla choice) {
  if (!m.is_mla() || choice == CpMla::heads) return false;
  return choice == CpMla::latent || m.kv_lora_rank + m.qk_rope_dim < heads_width(m, split);
}

int64_t context_ring_block_bytes(const ModelSpec& m, int64_t batch, int64_t seq_len, int64_t elem,
                                 const TensorSplit& split, CpMla choice) {
  const int64_t width = context_ring_latent(m, split, choice) ? m.kv_lora_rank + m.qk_rope_dim
                                                              : heads_width(m, split);
  return batch * (seq_len / split.cp) * width * elem;
}

int64_t context_ring_buffer_bytes(const ModelSpec& m, int64_t batch, int64_t seq_len, int64_t elem,
                                  const TensorSplit& split, CpMla choice) {
  if (split.cp <= 1) return 0;
  const int64_t block = context_ring_block_bytes(m, batch, seq_len, elem, split, choice);
  if (!context_ring_latent(m, split, choice)) return 5 * block;
  return 5 * block + 2 * batch * (seq_len / split.cp) * heads_width(m, split) * elem;
}

RingFlops context_ring_recompute_flops(const ModelSpec& m, int64_t batch, int64_t seq_len,
                                       const TensorSplit& split, CpMla choice) {
  if (split.cp <= 1 || !context_ring_latent(m, split, choice)) return {};
  const double up = 2.0 * static_cast<double>(batch * (seq_len / split.cp)) *
                    static_cast<double>(m.kv_lora_rank) *
                    static_cast<double>(local_heads(m, split) * (m.qk_nope_dim + m.v_head_dim));
  const double remote = static_cast<double>(split.cp - 1);
  return {remote * up, 3 * remote * up};
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
