// The time of one training step on the busiest GPU of a layout, and what it implies: MFU, HFU,
// tokens per second. Compute is GEMM FLOPs at an achievable fraction of the precision's dense
// peak plus attention FLOPs (causal half, as FlashAttention computes) at a lower fraction and
// memory-bound elementwise work at HBM bandwidth; communication is TP/SP collectives (NVLink
// when the TP group fits the domain), the CP K/V all-gather (hidden behind attention when it
// can be), the EP all-to-all (mostly hidden by DualPipe's overlapped F&B), PP point-to-point,
// and the DP/ZeRO collectives, overlapped with the backward/forward of one micro-batch as
// Megatron's distributed optimizer does. The pipeline bubble comes from playing the layout's
// schedule in the schedule simulator with these per-stage costs.
//
// Invariants: one place (Efficiency) holds every calibrated constant, with where it comes from;
// MFU counts model FLOPs with causal attention (6N + 6 L h s per token) against the dense peak
// of the layout's precision (so an FP8 run is judged against FP8's doubled peak); mfu_bf16 uses
// the BF16 peak whatever the precision; mfu_palm counts the full s x s attention (PaLM's
// 12 L h s), against the same peak as mfu.
#pragma once

#include <cmath>
#include <cstdint>

#include "plan/hardware.h"
#include "plan/layout.h"
#include "plan/memory.h"
#include "plan/model_spec.h"

namespace trillion::plan {

struct Efficiency {
  // Fraction of dense peak that a training step's GEMMs sustain. cuBLAS reaches ~75% of H100's
  // BF16 peak in isolation; inside a step, launch gaps, wave quantisation, stragglers and the
  // elementwise kernels we do not model separately cost more. 0.58 (574 TFLOP/s) is calibrated
  // on Llama 3 405B's first Table 4 row (8,192 GPUs, 43% MFU); the other two rows are then
  // predictions (tests/plan). FP8 at 0.48 of its doubled peak (~950 TFLOP/s, DeepSeek-V3's
  // fine-grained scaling costs throughput); FP4 0.40, an assumption.
  double gemm_bf16 = 0.58, gemm_fp8 = 0.48, gemm_fp4 = 0.40;
  // Causal FlashAttention forward+backward: FlashAttention-3 reaches ~75% of H100's BF16 peak
  // forward and less backward (Shah et al. 2407.08608); 55% for the pair, an assumption that the
  // long-context Table 4 row then checks.
  double attention = 0.55;
  // Collectives reach this fraction of the link's one-way bandwidth (NCCL bus bandwidth).
  double nvlink = 0.80, network = 0.80;
  // Share of TP/SP collective time hidden behind GEMMs (Megatron's default does not overlap).
  double tp_overlap = 0.0;
  // Share of EP all-to-all hidden: DualPipe overlaps it with the paired chunk (DeepSeek-V3
  // §3.2.1 "fully overlapped"); other schedules run it on the critical path.
  double ep_overlap_dualpipe = 0.9, ep_overlap_other = 0.0;
};

struct StepBreakdown {
  int microbatches = 0;              // m, per pipeline per step
  double layer_forward = 0;          // seconds, one average layer, one micro-batch, incl. comm
  double layer_backward_input = 0;   // B (+ recompute)
  double layer_backward_weight = 0;  // W
  // One schedule action's costs (a full stage of the rank; the simulator scales chunks) and the
  // p2p latency between stages: what the schedule was simulated with.
  double stage_forward = 0, stage_backward_input = 0, stage_backward_weight = 0, p2p = 0;
  // Seconds per step on the busiest rank:
  double compute = 0;    // GEMM + attention + elementwise (incl. recompute) for all micro-batches
  double recompute = 0;  // the part of compute spent recomputing
  double tp_comm = 0, cp_comm = 0, ep_comm = 0;  // exposed, all micro-batches
  double pp_comm = 0;  // p2p send time; it delays the step only through the simulated bubble
  double bubble = 0;   // idle time of the pipeline schedule
  double bubble_fraction = 0;
  double dp_comm = 0;      // exposed DP/ZeRO communication
  double optimizer = 0;    // the optimizer step (memory bound)
  double step = 0;         // total
  double model_flops = 0;  // per step, causal attention
  double mfu = 0, mfu_bf16 = 0, mfu_palm = 0, hfu = 0;
  double tokens_per_second = 0;
  MemoryBreakdown memory;
};

// Throws trillion::Error when the batch does not split into whole micro-batches for this
// layout or the schedule cannot run with that many (e.g. interleaved needs m % pp == 0).
// give_up_above: when the step's lower bound (work + DP + optimizer, no bubble) already
// exceeds it, return early with step = infinity without simulating the schedule (the search's
// pruning).
StepBreakdown model_step(const ModelSpec& m, const Gpu& gpu, const Layout& l, int64_t seq_len,
                         double batch_tokens, const Efficiency& eff = {},
                         double give_up_above = INFINITY);

// Number of micro-batches per pipeline per step; 0 if the batch does not divide.
int microbatches_for(const Layout& l, int64_t seq_len, double batch_tokens);

// Schedule simulations made so far (the search caches them by kind, p, m, v and cost ratios in
// a process-wide cache; model_step is therefore not thread-safe).
long schedule_simulations_run();

}  // namespace trillion::plan
