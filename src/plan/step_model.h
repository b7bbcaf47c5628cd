// The time of one training step on the busiest GPU of a layout, and what it implies: MFU, HFU,
// tokens per second. Each layer's GEMMs are timed shape by shape by the efficiency model
// (plan/efficiency.h: roofline with wave quantisation and K amortisation, per GPU generation),
// attention by FlashAttention's efficiency or, materialised, as batched GEMMs of the score
// matrix; elementwise work moves the layer's activations through HBM; communication is costed
// with the alpha-beta model per link class: TP all-reduces (or SP all-gathers/reduce-scatters),
// the CP ring's hops that its block kernels do not hide (plan/context_ring.h), the EP
// all-to-all (mostly hidden by DualPipe's overlapped F&B), PP point-to-point (asynchronous, or
// blocking each F and B as DeepSpeed's pipeline does), and the
// DP/ZeRO collectives overlapped with one micro-batch's backward and forward as Megatron's
// distributed optimizer does (ZeRO-2's per-micro-batch reduce-scatter with the next
// micro-batch). The pipeline bubble comes from playing the layout's schedule in the schedule
// simulator with the busiest rank's stage costs; every stage's layers (and the head, with pp = 1
// too) come from the exact stage partition.
//
// Invariants: MFU counts model FLOPs with causal attention (6N + 6 L h s per token) against the
// dense peak of the layout's precision (an FP8 run is judged against FP8's doubled peak);
// mfu_bf16 uses the 16-bit peak whatever the precision; mfu_palm counts the full s x s attention
// (PaLM's 12 L h s) against the same peak as mfu; HFU adds recompute FLOPs.
#pragma once

#include <cmath>
#include <cstdint>

#include "plan/hardware.h"
#include "plan/layout.h"
#include "plan/memory.h"
#include "plan/model_spec.h"

namespace trillion::plan {

// Overlap constants of the software stack (the hardware's live in the cluster file).
struct Efficiency {
  // Share of TP/SP collective time hidden behind GEMMs (Megatron's default overlaps none).
  double tp_overlap = 0.0;
  // Share of EP all-to-all hidden: DualPipe overlaps it with the paired chunk (DeepSeek-V3
  // §3.2.1 "fully overlapped"; 0.9 leaves its imperfect overlap exposed); other schedules run it
  // on the critical path.
  double ep_overlap_dualpipe = 0.9, ep_overlap_other = 0.0;
  // Passes over a layer's stored activations by its elementwise kernels: written once forward,
  // read and their gradients written backward (norms, RoPE, activations, softmax, residuals).
  double elementwise_passes = 3.0;
  // Pipeline sends and receives block the compute stream: DeepSpeed's PipelineEngine runs them as
  // instructions between its forward and backward steps, so each F and each B waits for its
  // receive and its send (2 transfers each). Megatron and the engine send asynchronously (false),
  // and a transfer then delays the step only through the simulated bubble.
  bool blocking_p2p = false;
  // Context parallelism as Llama 3 runs it (§3.3.2: K and V all-gathered before attention, dK
  // and dV reduce-scattered after it, exposed) instead of the engine's ring (plan/context_ring.h:
  // each hop hidden behind a ring step's block kernels where they last long enough).
  bool cp_all_gather = false;
};

struct StepBreakdown {
  int microbatches = 0;  // m, per pipeline per step
  // One schedule action's costs (a full stage of the busiest rank; the simulator scales chunks)
  // and the p2p latency between stages: what the schedule was simulated with.
  double stage_forward = 0, stage_backward_input = 0, stage_backward_weight = 0, p2p = 0;
  // Seconds per step on the busiest rank:
  double compute = 0;    // GEMM + attention + elementwise (incl. recompute) for all micro-batches
  double recompute = 0;  // the part of compute spent recomputing
  double tp_comm = 0, cp_comm = 0, ep_comm = 0;  // exposed, all micro-batches
  double pp_comm = 0;  // p2p send time; it delays the step only through the simulated bubble
  // Tied embeddings across pipeline ranks: the table's gradient and weights between the first
  // and last stage, once per step, exposed.
  double tied_embedding = 0;
  double bubble = 0;   // idle time of the pipeline schedule
  double bubble_fraction = 0;
  double dp_comm = 0;         // exposed DP/ZeRO communication
  double optimizer = 0;       // the optimizer step (memory bound)
  double step = 0;            // total
  double model_flops = 0;     // per step, causal attention
  double hardware_flops = 0;  // per step, with recompute (same attention convention)
  double mfu = 0, mfu_bf16 = 0, mfu_palm = 0, hfu = 0;
  double tokens_per_second = 0;
  int busiest_rank = 0;  // by compute time
  MemoryBreakdown memory;
};

// Throws trillion::Error when the batch does not split into whole micro-batches for this
// layout or the schedule cannot run with that many (e.g. interleaved needs m % pp == 0).
// give_up_above: when the step's lower bound (work, no bubble) already exceeds it, return early
// with step = infinity without simulating the schedule (the search's pruning).
StepBreakdown model_step(const ModelSpec& m, const Gpu& gpu, const Layout& l, int64_t seq_len,
                         double batch_tokens, const Efficiency& eff = {},
                         double give_up_above = INFINITY);

// Tied embeddings (or MTP modules) with the two ends on different pipeline ranks
// (parallel/pipeline/tied_embedding.h): the elements each end sends the other per step, each way
// (the head's gradient of the table to the first stage, the updated table back): the V/tp x C
// table, or under ZeRO-2/3 each dp rank's chunk of it, ceil(V/tp x C / dp). 0 without a copy.
double tied_embedding_elements(const ModelSpec& m, const Layout& l);

// Number of micro-batches per pipeline per step; 0 if the batch does not divide.
int microbatches_for(const Layout& l, int64_t seq_len, double batch_tokens);

// Narayanan et al. 2104.04473 eq. (3): FLOPs per iteration of a GPT with 4h MLP counted as
// Megatron counts them: GEMMs only, the full s x s attention, the logit layer, and one extra
// forward for activation recomputation: 96 B s l h^2 (1 + s/(6h) + V/(16 l h)).
double megatron_flops_per_iteration(const ModelSpec& m, double batch_sequences, int64_t seq_len);

// Schedule simulations made so far (cached by kind, p, m, v and cost ratios in a process-wide
// cache; model_step is therefore not thread-safe).
long schedule_simulations_run();

}  // namespace trillion::plan
