// The memory model of one GPU: model states by ZeRO stage (Rajbhandari et al. 1910.02054 §3),
// activations per layer as a list of stored tensors (Korthikanti et al. 2205.05198 §4 for the
// GPT block; the same method for our RMSNorm/GQA-or-MLA/RoPE/FlashAttention/SwiGLU(/MoE) block),
// scaled by recompute policy, TP/SP, CP and the pipeline's in-flight micro-batches, plus
// temporary buffers. Sizes are bytes; "GB" is 1e9 bytes everywhere.
//
// Invariants: a term is either sharded by TP (heads/columns) or sharded only under sequence
// parallelism (norms and residuals); recompute never increases a term.
#pragma once

#include <string>
#include <vector>

#include "plan/hardware.h"
#include "plan/layout.h"
#include "plan/model_spec.h"

namespace trillion::plan {

// ZeRO per-GPU model states for params parameters over n_d data-parallel ranks, with the
// mixed-precision Adam byte counts (2 param + 2 grad + K=12 optimizer): stage 0 16P; 1: 4P +
// 12P/N_d; 2: 2P + 14P/N_d; 3: 16P/N_d.
struct ModelStates {
  double parameters = 0, gradients = 0, optimizer = 0;
  double total() const { return parameters + gradients + optimizer; }
};
ModelStates zero_model_states(double params, int stage, int n_d, double param_bytes = 2,
                              double grad_bytes = 2, double optimizer_bytes = 12);

// Korthikanti et al. Table 2, bytes per layer for a GPT block with 16-bit activations:
// none sbh(34 + 5as/h); TP sbh(10 + 24/t + 5as/(ht)); TP+SP sbh(34/t + 5as/(ht));
// TP+selective sbh(10 + 24/t); TP+SP+selective 34sbh/t; full 2sbh.
double korthikanti_layer_bytes(double s, double b, double h, double a, int t, bool sp,
                               Recompute recompute);

// One stored tensor of a layer's forward, per token (the per-sequence s^2 terms carry s).
struct ActivationTerm {
  std::string name;
  double bytes_per_token = 0;
  bool tp_sharded = true;      // false: replicated across TP unless sequence parallel
  bool kept_selective = true;  // still stored under selective recompute
};

// Stored tensors of the GPT block (Korthikanti §4.1), 16-bit activations, 1-byte masks.
std::vector<ActivationTerm> gpt_block_terms(double s, double h, double a);

// Stored tensors of our block for one layer (moe: a MoE layer of the spec), element size
// elem_bytes (4 fp32, 2 bf16, 1 fp8). FlashAttention keeps Q, K, V, O and the fp32 logsumexp
// (no s^2 term); RoPE is applied in place to Q and K (its backward needs only cos/sin); RMSNorm
// keeps its input and an fp32 1/rms; SwiGLU keeps gate and up (and their product, the down
// projection's input); no dropout. Selective recompute recomputes the norm outputs and the
// SwiGLU product from what is kept (elementwise, cheap).
std::vector<ActivationTerm> block_terms(const ModelSpec& m, bool moe, double elem_bytes);

// Sum of terms per token with TP degree t, sequence parallel sp and the recompute policy; full
// recompute keeps only the layer input (elem_bytes * h per token, / t under SP).
double layer_bytes_per_token(const std::vector<ActivationTerm>& terms, int t, bool sp,
                             Recompute recompute, double input_bytes_per_token);

// How a model's layers land on pipeline ranks.
struct StageShape {
  int layers_per_rank = 0;   // layers on the busiest rank (both DualPipe copies counted)
  int layers_per_stage = 0;  // layers of one pipeline stage (one chunk's worth x chunks)
  double moe_fraction = 0;   // share of those layers that are MoE layers
};
// The LM head counts as head_flops/layer_flops layers when balancing (Llama 3 moved one layer
// off the first and last stages for the same reason).
StageShape stage_shape(const ModelSpec& m, const Layout& l);

// Micro-batches of one stage's activations the first (busiest) pipeline rank holds, from the
// papers' memory columns (equal to the simulator's peak_inflight, which tests check).
double inflight_microbatches(const Layout& l, int microbatches);

// Parameters held by the busiest rank before ZeRO sharding: non-expert weights (its layers split
// by TP, plus the embedding or the head; both under DualPipe or pp = 1) and routed experts (its
// MoE layers' experts split over EP x TP).
struct LocalParams {
  double dense = 0, expert = 0;
};
LocalParams params_per_gpu(const ModelSpec& m, const Layout& l);

struct MemoryBreakdown {
  double weights = 0, gradients = 0, optimizer = 0;  // model states after ZeRO sharding
  double activations = 0;                            // in-flight micro-batches' stored tensors
  double temporary = 0;  // logits, recompute working set, ZeRO-3 prefetch, comm buffers
  double overhead = 0;   // CUDA context, library workspaces, allocator fragmentation
  double total() const {
    return weights + gradients + optimizer + activations + temporary + overhead;
  }
};

MemoryBreakdown memory_per_gpu(const ModelSpec& m, const Layout& l, int64_t seq_len,
                               int microbatches);

}  // namespace trillion::plan
