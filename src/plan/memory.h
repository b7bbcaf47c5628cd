// The memory model of every GPU of a layout: model states by ZeRO stage (Rajbhandari et al.
// 1910.02054 §3) with the layout's gradient and moment bytes, activations per layer as a list
// of stored tensors built from the block's parts (norm kind, MLP kind, attention kind and kernel,
// dropout; Korthikanti et al. 2205.05198 §4 is the special case of a GPT block, the engine's
// block the other), scaled by the recompute policy, TP with or without SP, CP and the pipeline's
// in-flight micro-batches per rank and chunk from the schedule itself (held as the engine's
// per-chunk slots, or as a caching allocator's live peak: Layout::allocation), plus temporary
// buffers.
// Sizes are bytes; "GB" is 1e9 bytes everywhere.
//
// Invariants: a term is either sharded by TP (heads/columns) or sharded only under sequence
// parallelism (norms, residuals, dropout masks); recompute never increases a term; every rank's
// breakdown is computed and the plan reports the largest.
#pragma once

#include <string>
#include <vector>

#include "plan/hardware.h"
#include "plan/layout.h"
#include "plan/model_spec.h"
#include "plan/stage_partition.h"

namespace trillion::plan {

// ZeRO per-GPU model states for params parameters over n_d data-parallel ranks (default: the
// paper's mixed-precision Adam, 2 param + 2 grad + K=12 optimizer): stage 0 16P; 1: 4P + 12P/N_d;
// 2: 2P + 14P/N_d; 3: 16P/N_d.
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
  // Counted only under sequence parallelism, whole (not divided by tp): the gathered norm
  // outputs this engine keeps for the column-parallel GEMMs' weight gradients.
  bool sp_gathered = false;
  bool kept_norm_up = true;  // still stored under DeepSeek-V3's norm-up recompute
};

// Korthikanti §4.1's own list for the GPT block (16-bit, 1-byte masks), written out as in the
// paper: the independent check of block_terms on a GPT spec.
std::vector<ActivationTerm> gpt_block_terms(double s, double h, double a);

struct ActivationOptions {
  double elem_bytes = 2;  // stored activation element (4 fp32, 2 bf16/fp16, 1 fp8)
  double stat_bytes = 4;  // a norm's fp32 statistic per token (Korthikanti's Table 2 omits them)
  // Bytes of a stored GEMM input (norm outputs, O, the down projection's input, MLA latents,
  // dispatched expert inputs); 0: elem_bytes, or 1 under an FP8/FP4 layout, which caches them in
  // FP8 (DeepSeek-V3 §3.3.2).
  double gemm_input_bytes = 0;
  // DeepSeek-V3 §3.3.3's FP8 cache (Layout::fp8_activations): bytes per element of the
  // attention output O (E5M6, 12 bits, with a power-of-2 scale per 128: 1.5 + 1/128; 0: the
  // gemm_input_bytes), and whether the MoE SwiGLU's inputs are cached at gemm_input_bytes with
  // its output recomputed in backward instead of kept (the routing weight then applied inside
  // it, so the experts' outputs are not kept for the combine's backward).
  double attention_output_bytes = 0;
  bool moe_swiglu_recomputed = false;
  // Under SP, keep the all-gathered norm outputs (2 h per token per layer, whole on every tp
  // rank) as this engine does (model/block.h), instead of re-gathering them in backward as
  // Megatron does (Korthikanti's 34 s b h / t): the engine's own layout.
  bool keeps_sp_gathered_norms = false;
};

// Stored tensors of one layer of the spec (moe: a MoE layer) at sequence length s:
//   norm 1 input (the residual) e h, norm 1 output = QKV input e h, norm statistics (RMSNorm 1,
//   LayerNorm 2 per norm), Q and K after RoPE e (NH + KV) d_qk, V e KV d_v (MLA: its latents and
//   per-head K/V), then the attention core: FlashAttention keeps its fp32 logsumexp 4 NH;
//   materialised attention keeps the softmax e NH s, and with dropout its 1-byte mask NH s and
//   output e NH s; the core's output O e NH d_v; with dropout a 1-byte mask h after each of the
//   attention and MLP; norm 2 input e h and output e h; the MLP: SwiGLU gate and up 2 e F and
//   their product e F, GELU its input e F and output e F (MoE: router scores, the top-k
//   dispatched copies and the experts' outputs, the experts' gate/up/product). Selective
//   recompute recomputes the attention core's internals (softmax, masks, FlashAttention's state;
//   Korthikanti §5) and, for FlashAttention, O itself (one more FlashAttention forward
//   regenerates it, as the engine does), SwiGLU's product (one multiply of two kept tensors) and,
//   for MLA, the per-head Q, K and V from the kept latents (DeepSeek-V3 §3.3.2 recomputes the
//   MLA up-projections); GELU's output is kept. Norm-up recompute (DeepSeek-V3 §3.2.3) drops
//   every norm output (MLA's latent norms too) and MLA's per-head Q, K and V, and keeps the
//   attention core's output and state.
std::vector<ActivationTerm> block_terms(const ModelSpec& m, bool moe, double seq_len,
                                        const ActivationOptions& o = {});

// Sum of terms per token with TP degree t, sequence parallel sp and the recompute policy; full
// recompute keeps only the layer input (input_bytes_per_token, / t under SP).
// DeepSeek-V3 §3.3.3's FP8 activation cache as ActivationOptions: FP8 E4M3 with one fp32 scale
// per 1x128 tile (1 + 4/128 bytes per element), O in E5M6 (1.5 + 1/128), the MoE SwiGLU's
// output recomputed.
ActivationOptions fp8_activation_cache(ActivationOptions base = {});
constexpr double kFp8CachedBytes = 1.0 + 4.0 / 128, kE5m6CachedBytes = 1.5 + 1.0 / 128;
double layer_bytes_per_token(const std::vector<ActivationTerm>& terms, int t, bool sp,
                             Recompute recompute, double input_bytes_per_token);
double layer_bytes_per_token(const std::vector<ActivationTerm>& terms, int t, bool sp,
                             RecomputePolicy recompute, double input_bytes_per_token);

// How a layout's pipeline holds the model: the stages (p x v for interleaved, p otherwise), their
// layers, and which stages each rank holds in chunk order (DualPipe: stage r and stage p-1-r, one
// per model copy), taken from the schedule's placement.
struct PipelineShape {
  std::vector<StageUnits> stages;
  std::vector<int> stage_layers;              // layers per stage
  std::vector<std::vector<int>> rank_stages;  // [rank][chunk] -> stage
  int chunks = 1;
  int max_rank_layers() const;  // layers of the busiest rank (both DualPipe copies counted)
};
// Stage weights of the balanced partition: the embedding counts one layer (its stage holds the
// most activations in flight; Llama 3 §3.3.2), the head its matmul work in layers.
StageWeights balanced_stage_weights(const ModelSpec& m);
// The most pipeline stages (p x v) a partition accepts: L for the even split, L + 2 for the
// balanced one (its first stage may hold the embedding alone, its last the head alone).
int64_t max_pipeline_stages(const ModelSpec& m, Partition partition);
// Throws Error naming the values when the stages cannot hold whole layers (p x v above that).
PipelineShape pipeline_shape(const ModelSpec& m, const Layout& l);

// Micro-batches of one stage's activations the first (busiest) pipeline rank holds, from the
// papers' memory columns (equal to the simulator's peak_inflight, which tests check).
double inflight_microbatches(const Layout& l, int microbatches);

// Parameters a rank holds before ZeRO sharding, split by TP (matrices whose split dimension
// divides; others replicated) and, for routed experts, by EP x TP.
// routing_bias: the part of `dense` that is MoE routing biases (plan::is_routing_bias).
struct LocalParams {
  double dense = 0, expert = 0, routing_bias = 0;
};
LocalParams params_of_rank(const ModelSpec& m, const Layout& l, const PipelineShape& shape,
                           int rank);
// A rank's model states under ZeRO `stage`: dense parameters sharded over n_d ranks (dp x cp),
// routed experts over n_e (dp x cp / ep, the ranks holding the same experts). Under ZeRO-3 the
// routing biases stay whole outside the sharded stores, as parameters only (no gradient, no
// optimizer state: the balancing rule moves them in place); below it they are dense tensors.
ModelStates rank_model_states(const LocalParams& p, int stage, int n_d, int n_e, double param_bytes,
                              double grad_bytes, double optimizer_bytes);
// The most any rank holds (dense and expert maxima may come from different ranks).
LocalParams params_per_gpu(const ModelSpec& m, const Layout& l);

struct MemoryBreakdown {
  double weights = 0, gradients = 0, optimizer = 0;  // model states after ZeRO sharding
                                                     // (optimizer: + an EMA kept on the GPU)
  double host_ema = 0;     // an EMA kept in host memory (not GPU bytes, not in total())
  double activations = 0;  // in-flight micro-batches' stored tensors
  double temporary = 0;    // logits, one layer's recompute set, ZeRO-3 prefetch, MoE, CP ring
  double overhead = 0;     // CUDA context, library workspaces, allocator fragmentation
  int rank = 0;            // the pipeline rank this is of
  double total() const {
    return weights + gradients + optimizer + activations + temporary + overhead;
  }
};

// Every pipeline rank's memory; overhead_bytes is the GPU's fixed reservation (Gpu).
// Activations are stored in 16 bits with fp32 statistics unless `storage` says otherwise (the
// engine's fp32 runs: {4, 4}).
std::vector<MemoryBreakdown> memory_per_rank(const ModelSpec& m, const Layout& l, int64_t seq_len,
                                             int microbatches, double overhead_bytes = 3e9,
                                             const ActivationOptions& storage = {});
// The rank with the largest total.
MemoryBreakdown memory_per_gpu(const ModelSpec& m, const Layout& l, int64_t seq_len,
                               int microbatches, double overhead_bytes = 3e9,
                               const ActivationOptions& storage = {});

// Layers per stage for which every pipeline rank of `l` fits in `hbm_bytes`, where `l`'s own split
// (even or balanced) does not: starting from that split, one layer at a time moves from a stage of
// the fullest rank to the stage where that lowers the fullest rank's memory most, while it does,
// and no stage grows past the longest stage of the starting split (so the busiest stage, which
// the step model charges every rank, keeps its time). A model whose embedding, head and MTP
// modules weigh on one rank, as DeepSeek-V3's under DualPipe, fits by giving that rank fewer
// layers. Empty when no such split is found; l.pp > 1.
std::vector<int> fitting_stage_layers(const ModelSpec& m, const Layout& l, int64_t seq_len,
                                      int microbatches, double overhead_bytes, double hbm_bytes);

// The most activation bytes rank `rank` holds at one moment of the layout's schedule when one
// micro-batch of chunk c stores chunk_bytes[c] (a caching allocator's peak, Allocation::kLive);
// never more than the sum over chunks of chunk_bytes[c] x schedule_slots (the engine's slots).
double live_peak_bytes(const Layout& l, int microbatches, int rank,
                       const std::vector<double>& chunk_bytes);

// The most micro-batches a schedule of p ranks is played with: 2 m1, m1 = max(2p, 16) rounded
// up to a multiple of 2p (so every schedule accepts both m1 and 2 m1). From 2p micro-batches on
// a schedule is in its steady state: its activation slots and live peak are those of 2 m1, and
// its bubble is extrapolated from m1 and 2 m1 (step_model.cpp), so no schedule grows with the
// batch (--seq 1 makes millions of micro-batches).
int steady_state_microbatches(int p);

// Activation slots per (rank, chunk) of a layout's schedule with m micro-batches (the schedule
// generated with unit costs, cached): what each rank's StageModels allocate.
const std::vector<std::vector<int>>& schedule_slots(const Layout& l, int microbatches);

}  // namespace trillion::plan
