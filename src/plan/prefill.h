// Inference prefill: the time to first token for one sequence of S tokens on tp x cp x pp GPUs,
// and the memory each GPU needs (weights, KV cache, workspace), with the training step's own
// models (plan/efficiency.h, plan/context_ring.h): every GEMM of a layer's forward timed at its
// shape for this rank's S/cp tokens, FlashAttention forward for this rank's 1/cp share of the
// causal attention, one pass of elementwise work over the layer's activations, TP's two
// all-reduces (or SP's all-gathers and reduce-scatters, the same bytes) of the [S/cp, h]
// activation per layer, and context parallelism as Yang et al. 2411.01783 run it: ring pass-KV
// (each of the cp - 1 K/V hops travels behind one ring step's attention blocks, charged only
// where it outlasts them: context_ring_exposed_seconds' forward) or all-gather of K and V before
// attention (exposed). One sequence passes the pipeline's stages one after the other (no
// micro-batches to overlap), so pp splits the weights and the KV cache, never the time: S's
// stages run in turn, plus a send of the [S/cp, h] activation between stages.
//
// Memory per GPU: the stage's weights in the layout's precision (2 bytes, FP8/FP4 1 byte; with
// low_precision_ffn_only the FFN's alone, the rest in 2) with TP splitting what it divides; the KV cache of this rank's S/cp tokens for its stage's layers
// (K and V of the kv heads, or MLA's latents, in 16 bits); workspace = one layer's forward
// activations of S/cp tokens (every stored-activation term of plan/memory.h's block, none kept
// beyond the layer) + the ring's K/V buffers + the GPU's fixed overhead.
//
// Invariants: seconds are for the busiest pipeline stage sum (all stages run in turn); with
// tp = cp = pp = 1 it is one GPU's forward of S tokens; the search ranks fitting layouts by
// seconds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/hardware.h"
#include "plan/model_spec.h"

namespace trillion::plan {

struct PrefillLayout {
  int tp = 1, cp = 1, pp = 1;
  bool cp_all_gather = false;  // all-gather K/V before attention instead of the pass-KV ring
  Precision precision = Precision::kBf16;
  // With an 8- or 4-bit precision: only the feed-forward (and expert) GEMMs and weights are in
  // it, the attention projections stay in bf16 (Llama 3's FP8 inference, 2407.21783 §6.2, as
  // Yang et al. run it: `plan --prefill --fp8-linears ffn`).
  bool low_precision_ffn_only = false;
  std::string to_string() const;  // "tp=8,cp=16,pp=1,cp_comm=ring,precision=fp8[,linears=ffn]"
};

struct PrefillEstimate {
  PrefillLayout layout;
  double seconds = 0;  // time to first token
  // Where it goes (seconds, all layers and stages):
  double gemm = 0, attention = 0, elementwise = 0, tp_comm = 0, cp_comm = 0, pp_comm = 0, head = 0;
  // Bytes per GPU (the fullest pipeline stage):
  double weights = 0, kv_cache = 0, workspace = 0, overhead = 0;
  double memory() const { return weights + kv_cache + workspace + overhead; }
  double model_flops = 0;  // the forward's FLOPs (causal attention), all GPUs
};

// One layout's estimate. Throws Error when tp, cp, pp do not fit the model (tp must divide the
// heads and stay in the NVLink domain, cp must divide the tokens, pp at most the layers).
PrefillEstimate estimate_prefill(const ModelSpec& m, const Gpu& gpu, int64_t tokens,
                                 const PrefillLayout& l);

struct PrefillSearch {
  std::vector<PrefillEstimate> ranked;  // fitting layouts, fastest first
  long considered = 0, too_big = 0;
  PrefillEstimate closest;  // the smallest memory among those that did not fit (if none fit)
};

// Every tp (divisor of the heads within the NVLink domain) x cp (power of two dividing the
// tokens) x pp (divisor of the layers) using exactly `gpus` GPUs, with the fixed fields kept
// (fixed_* > 0), both cp variants unless fixed, each precision (8/4-bit ones on the FFN only
// when low_precision_ffn_only); refuses what does not fit in HBM. Throws Error naming the
// closest layout's bytes when nothing fits.
PrefillSearch search_prefill(const ModelSpec& m, const Gpu& gpu, long gpus, int64_t tokens,
                             const std::vector<Precision>& precisions, int fixed_tp, int fixed_cp,
                             int fixed_pp, int fixed_cp_all_gather /* -1: search */, int keep,
                             bool low_precision_ffn_only = false);

// The text report of a search: the best layout, its time and memory by part, the runners-up.
std::string format_prefill_text(const ModelSpec& m, const Gpu& gpu, long gpus, int64_t tokens,
                                const PrefillSearch& s);

}  // namespace trillion::plan
