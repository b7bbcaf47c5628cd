// Ring attention's costs (context parallelism, parallel/context.h), in one place: the bytes one
// rank sends per layer and micro-batch (the engine's cp counters are tested against them), its
// ring buffers (workspace), and the time of the ring that its block kernels do not hide (what
// plan/step_model charges). Liu et al. 2310.01889 §3: with the zigzag split every ring step
// computes 1/cp of the layer's causal attention (each rank's two chunks meet exactly two full
// chunk blocks of every other rank, and their own diagonal), and the hop carrying the next block
// travels while the current one is computed.
//
// With S = one rank's K/V block = B * T/cp * (KV/tp) * (qk_dim + v_dim) elements (MLA: the
// per-head K and V, heads/tp), per layer and micro-batch, per rank (sent = received):
//   forward   (cp - 1) S        steps 0..cp-2 each have the next K/V block in flight
//   backward  (2 cp - 1) S      (cp - 1) S of K/V again, cp S of dK/dV: each block's accumulator
//                               makes cp hops and lands on its owner
// and the time no block kernel hides (hop(n) = alpha + n / beta on the cp group's link; f, b =
// the layer's attention core forward and backward on this rank, so f/cp, b/cp per step):
//   forward   (cp - 1) max(0, hop(S) - f/cp)
//   backward  max(0, hop(S) - b/cp)              step 0: the next K/V block
//           + (cp - 2) max(0, hop(2S) - b/cp)    steps 1..cp-2: K/V and the previous dK/dV
//           + max(0, hop(S) - b/cp)              step cp-1: the previous dK/dV
//           + hop(S)                             the last dK/dV hop, after the last kernel
// Recomputation that replays the attention core replays the forward ring (bytes and time).
//
// MLA (issue 33): the ring carries either every head's up-projected K and V (CpMla::heads, S as
// above) or the latent (CpMla::latent): this rank's normed kv latent rmsnorm(c_kv) and its
// rotated rope key, S = B * T/cp * (DC + DR) elements, each receiver up-projecting the block
// with its own Wkv_b (and in backward projecting the block's dK/dV back onto the latent, the
// accumulator that travels, DC + DR wide, and adding the block's Wkv_b wgrad). The same hops,
// so the same formulas in S. automatic (the default) picks the latent where it is smaller:
// DC + DR < NH/tp (DN + DR + VD) (DeepSeek-V3: 576 vs 128/tp * 320 elements per token). Its
// buffers: 5 latent blocks (2 + 3 as above) and 2 per-head blocks (the up-projected K/V of the
// block being computed and its dK/dV). Its recompute per layer and micro-batch on one rank, with
// U = 2 * B * T/cp * DC * NH/tp * (DN + VD) FLOPs (one block's up-projection): forward
// (cp - 1) U (every remote block), backward 3 (cp - 1) U (the up-projection again, and the
// dgrad and wgrad of every remote block, which the heads ring does on the owner once).
//
// Invariants: cp = 1 costs nothing; bytes are exact integers (the tests compare them with ==).
#pragma once

#include <cstdint>
#include <string>

#include "plan/activation_memory.h"
#include "plan/efficiency.h"
#include "plan/model_spec.h"

namespace trillion::plan {

// Which blocks MLA's ring carries (parallel.cp_mla); GQA's always carries its K/V heads.
enum class CpMla { automatic, heads, latent };
CpMla parse_cp_mla(const std::string& name, const std::string& field);  // auto | heads | latent
const char* cp_mla_name(CpMla choice);

// Whether the ring carries the latent: an MLA model and latent, or automatic with
// DC + DR < NH/tp (DN + DR + VD).
bool context_ring_latent(const ModelSpec& m, const TensorSplit& split,
                         CpMla choice = CpMla::automatic);

struct RingBytes {
  uint64_t forward = 0, backward = 0;
  uint64_t total() const { return forward + backward; }
};

// Bytes one rank sends over the cp group per layer and micro-batch, for K/V blocks of
// `block_bytes`.
RingBytes context_ring_bytes(int64_t cp, uint64_t block_bytes);

// One rank's K/V block: batch * seq_len/cp * KV/tp * (qk_dim + v_dim) * elem_bytes (a kv head
// count tp does not divide stays whole on every rank, as plan/parameter_table replicates it);
// under MLA's latent ring batch * seq_len/cp * (DC + DR) * elem_bytes.
int64_t context_ring_block_bytes(const ModelSpec& m, int64_t batch, int64_t seq_len,
                                 int64_t elem_bytes, const TensorSplit& split,
                                 CpMla choice = CpMla::automatic);

// Ring attention's buffers per rank (parallel/context.h): 2 K/V blocks (current + arriving) and
// 3 dK/dV blocks (this step's, the one being sent, the one arriving); 0 with cp = 1. The latent
// ring: 5 latent blocks and 2 per-head K/V blocks.
int64_t context_ring_buffer_bytes(const ModelSpec& m, int64_t batch, int64_t seq_len,
                                  int64_t elem_bytes, const TensorSplit& split,
                                  CpMla choice = CpMla::automatic);

// The latent ring's recomputed up-projection FLOPs per layer and micro-batch on one rank
// (forward (cp - 1) U, backward 3 (cp - 1) U; 0 for the heads ring and cp = 1).
struct RingFlops {
  double forward = 0, backward = 0;
};
RingFlops context_ring_recompute_flops(const ModelSpec& m, int64_t batch, int64_t seq_len,
                                       const TensorSplit& split, CpMla choice = CpMla::automatic);

struct RingSeconds {
  double forward = 0, backward = 0;
};

// The ring's exposed seconds per layer and micro-batch (the formula above): blocks of
// `block_bytes` over `link`, hidden behind attention_forward / cp and attention_backward / cp
// seconds of block kernels per step.
RingSeconds context_ring_exposed_seconds(int64_t cp, double block_bytes, const LinkCost& link,
                                         double attention_forward, double attention_backward);

}  // namespace trillion::plan
