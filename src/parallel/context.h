// Context parallelism's algorithm: causal ring attention (Liu et al. 2310.01889) over the zigzag
// or contiguous split of model/sequence_split.h. Each rank keeps its T/cp query rows
// (its spans of model/sequence_split.h) and the K/V blocks of all cp ranks visit it around the
// ring (parallel/context_comm.h), one per step, the next one travelling while the current one is
// computed:
//   forward   out = 0, lse = -inf; for step s = 0..cp-1: block of rank r-s; for every (query
//             span, key span) pair with a visible key, (out, lse) := exact merge with the block's
//             attention (backend flash_attention_block_forward: online softmax across blocks).
//   backward  dQ accumulates locally from the final (out, lse); the K/V blocks go round again and
//             each block's dK/dV accumulator travels with it, gaining each rank's contribution,
//             and after cp hops lands on the rank that owns the block.
// Pairs whose keys all come after their queries are skipped (never computed, counted as
// skipped); under a document mask (packed sequences) so are pairs whose keys all lie before the
// documents of their queries in every batch row. The K/V blocks still go all the way round (the
// bytes do not depend on the documents); zigzag keeps one early and one late span per rank. GQA:
// K/V blocks hold the rank's KV heads, shared by NH/KV query heads each; a block row is
// K [KV*HD] | V [KV*VD] (VD = the value head dim, = HD except under MLA, whose per-head K and V
// travel as KV = NH heads). Counters, per pass (forward, backward): visible (query, key) pairs per
// rank give the causal attention FLOPs (2 (HD + VD) per pair and head forward: Q K^T and P V),
// the measure of load balance; computed and skipped span pairs. Backward visits the same pairs as
// forward. Buffers (workspace, per rank): 2 K/V blocks (current + receiving) and 3 dK/dV blocks
// (this step's, the one being sent, the one arriving), each B * T/cp * KV (HD + VD) elements.
// MLA's latent ring (latent_width = DC + DR > 0, forward_latent / backward_latent): the blocks
// that go round are the owners' latents rmsnorm(c_kv) | k_rope, B * T/cp * (DC + DR) elements,
// and their gradients; each step up-projects the block it holds into the per-head K/V scratch
// (step 0: a copy of qkv's own K/V) and runs the same block kernels on it, and backward maps the
// scratch's dK/dV back onto the latent (the accumulator that travels) and adds the block's Wkv_b
// wgrad on this rank (model/mla.h does both through ContextAttention::LatentKeys). Buffers: 2 + 3
// latent blocks and 2 per-head blocks (up-projected K/V and its dK/dV), plan/context_ring.h's.
#pragma once

#include <cstdint>
#include <functional>

#include "core/memory.h"
#include "model/attention.h"
#include "model/local_shape.h"
#include "model/sequence_split.h"
#include "parallel/context_comm.h"

namespace trillion::parallel {

// What one pass (forward or backward) did, summed over its calls.
struct RingPassCounts {
  int64_t visible_pairs = 0;        // (query, key) pairs attended, per batch row and head
                                    // (under a document mask: their mean over the batch rows,
                                    // rounded down)
  int64_t visible_pairs_batch = 0;  // the same summed over the batch rows, per head
  int64_t blocks_computed = 0;      // (query span, key span) kernel calls
  int64_t blocks_skipped = 0;  // fully masked span pairs (every key after every query, or, under
                               // a document mask, before every query's document in every row)
  int64_t calls = 0;
};

struct RingCounters {
  RingPassCounts forward, backward;
  double wait_seconds = 0;     // blocked on the ring (forward and backward)
  double compute_seconds = 0;  // in the block kernels
};

// Causal (query, key) pairs of a query span against a key span: keys at or before each query.
int64_t visible_pairs(const AttentionSpan& q, const AttentionSpan& k);
// The same inside documents: keys k with start[q] <= k <= q, summed over the B batch rows.
int64_t visible_pairs(const AttentionSpan& q, const AttentionSpan& k, const DocumentMask& documents,
                      int64_t batch);

class RingAttention final : public ContextAttention {
 public:
  // shape: this rank's LocalShape (T = T_local); seq_len: the whole sequence.
  RingAttention(Backend& backend, MemoryTracker& tracker, comm::Communicator& cp,
                SequenceSplit split, const LocalShape& shape, int64_t seq_len, DType dtype,
                AttentionBlocks blocks);
  // The same from this rank's attention core shape (T = T_local; VD may differ from HD).
  // latent_width > 0 (MLA: DC + DR): the latent ring.
  RingAttention(Backend& backend, MemoryTracker& tracker, comm::Communicator& cp,
                SequenceSplit split, const AttentionShape& shape, int64_t seq_len, DType dtype,
                AttentionBlocks blocks, int64_t latent_width = 0);

  void forward(Tensor out, Tensor lse, const Tensor& qkv,
               const DocumentMask& documents = {}) override;
  void backward(Tensor dqkv, const Tensor& dout, const Tensor& out, const Tensor& qkv,
                const Tensor& lse, const DocumentMask& documents = {}) override;

  int64_t latent_width() const override { return latent_; }
  void forward_latent(Tensor out, Tensor lse, const Tensor& qkv, const Tensor& ckv_norm,
                      const Tensor& k_rope, const LatentKeys& keys,
                      const DocumentMask& documents = {}) override;
  void backward_latent(Tensor dqkv, Tensor d_ckv_norm, Tensor d_k_rope, const Tensor& dout,
                       const Tensor& out, const Tensor& qkv, const Tensor& ckv_norm,
                       const Tensor& k_rope, const Tensor& lse, const LatentKeys& keys,
                       const DocumentMask& documents = {}) override;

  const RingCounters& counters() const { return counters_; }
  // For measurement (bench attention --cp): wait for every hop right after starting it, so no
  // transfer overlaps a block kernel. Same results, same bytes.
  void set_serialized(bool on) { serialized_ = on; }
  // Bytes of one rank's K/V (or latent) block (what one ring hop carries).
  uint64_t block_bytes() const;
  // Causal attention FLOPs this rank did in forward passes (2 (HD + VD) per visible pair and
  // head).
  double forward_flops() const;

 private:
  Tensor kv_of(const Tensor& qkv) const;  // the K | V columns of qkv, [N, KV (HD + VD)] (a view)
  // ring_.start, and under set_serialized(true) its wait.
  void start(const Tensor& send, const Tensor& recv, RingStream stream);
  // The invariant that plan/'s ring bytes are the engine's: what one call sent, checked.
  void check_bytes(uint64_t sent, uint64_t formula, const char* pass) const;
  // Every (query span, key span) pair of this rank's queries against `source`'s keys with a
  // visible key, counted into `counts` (the others as skipped).
  template <typename F>
  void for_pairs(int source, const DocumentMask& documents, RingPassCounts& counts, F&& f);
  // The ring's two loops, shared by the per-head and the latent ring; kv_[0] holds this rank's
  // block on entry. Each step sends the block it holds on while attending to it: `keys(step,
  // block)` gives the K/V the attention reads (the block itself, or its up-projection). In
  // backward, the block's dK/dV go into `grad_target(mine)` (zeroed here), `fold(block, mine)`
  // turns them into the travelling accumulator `mine` (nothing to do when the target is mine),
  // and the accumulator that arrives last — this rank's own block — is returned.
  using StepKeys = std::function<const Tensor&(int step, const Tensor& block)>;
  void ring_forward(Tensor out, Tensor lse, const Tensor& qkv, const AttentionShape& shape,
                    const DocumentMask& documents, const StepKeys& keys, const char* pass);
  const Tensor& ring_backward(
      Tensor dqkv, const Tensor& dout, const Tensor& out, const Tensor& qkv, const Tensor& lse,
      const AttentionShape& shape, const DocumentMask& documents, const StepKeys& keys,
      const std::function<const Tensor&(const Tensor& mine)>& grad_target,
      const std::function<void(const Tensor& block, const Tensor& mine)>& fold, const char* pass);
  StepKeys latent_keys(const Tensor& qkv, const LatentKeys& keys);

  Backend& be_;
  CpRing ring_;
  SequenceSplit split_;
  AttentionShape shape_;
  int64_t seq_len_;
  AttentionBlocks blocks_;
  int64_t latent_ = 0;  // DC + DR under the latent ring
  Buffer buffers_;      // kv[2], dkv[3] (the travelling blocks); latent ring: up, d_up
  Tensor kv_[2], dkv_[3], up_, d_up_;
  RingCounters counters_;
  bool serialized_ = false;
};

}  // namespace trillion::parallel
