// A parallel layout of a training run: the degrees of tensor (with or without sequence
// parallelism), pipeline, context, expert and data parallelism, the ZeRO stage, the pipeline
// schedule and its chunks, how layers are cut into stages, the recompute policy, micro-batch size,
// precision and the bytes of gradients and Adam moments. Text form "tp=8,sp=1,pp=16,cp=1,ep=1,
// dp=64,zero=1,schedule=interleaved,chunks=4,partition=even,recompute=selective,micro_batch=1,
// precision=bf16,grad=fp32,moments=fp32,alloc=slots,act=bf16,ema=none,cp_comm=ring,p2p=async".
//
// Invariants: gpus() = tp * pp * cp * dp (EP is carved out of dp x cp, as in DESIGN.md's mesh,
// so it does not multiply the GPU count); sp matters only when tp > 1.
#pragma once

#include <string>
#include <vector>

#include "plan/hardware.h"
#include "schedule/action.h"

namespace trillion::plan {

// The engine's recompute policies (model/config.h reads the same enum).
enum class Recompute { kNone, kSelective, kFull };
std::string recompute_name(Recompute r);
Recompute parse_recompute(const std::string& name);  // none, selective, full
// The planner's policies: the engine's, plus DeepSeek-V3's (§3.2.3, "recomputation of RMSNorm
// and MLA up-projection"): every RMSNorm output and MLA's per-head Q, K and V are recomputed in
// backward from the kept norm inputs and latents; the attention core is not (kNormUp, text
// "norm-up"; a layout holds it as recompute = kNone with norm_up set, so the engine's enum and
// its switches stay as they are).
enum class RecomputePolicy { kNone, kNormUp, kSelective, kFull };
RecomputePolicy policy_of(Recompute r, bool norm_up = false);

// How stored activations are cached (DeepSeek-V3 §3.3.3): kBf16 keeps them in 16 bits; kFp8
// caches the inputs of the FP8 linears in FP8 E4M3 with one fp32 scale per 1x128 tile, the
// attention output (the input of the linear after attention) in E5M6 with a power-of-2 scale
// per 128, and the MoE SwiGLU's inputs in FP8 with its output recomputed in backward. kAuto:
// kFp8 under an FP8 or FP4 layout, else kBf16.
enum class ActivationCache { kAuto, kBf16, kFp8 };
// Where an exponential moving average of the parameters lives (DeepSeek-V3 §3.2.3): none,
// on the GPU (fp32, sharded as the optimizer states), or in host memory, updated
// asynchronously after each step (no GPU bytes).
enum class Ema { kNone, kGpu, kHost };
std::string ema_name(Ema e);

// Stage partition (plan/stage_partition.h): the engine's even split, balanced with the
// embedding and head weighed as layers, or explicit layer counts per stage (Layout::stage_layers,
// written "3/4/4/.../2"; the search finds one where neither split fits memory: plan/search.h).
enum class Partition { kEven, kBalanced, kExplicit };
std::string partition_name(Partition p);

// How a pipeline rank's activation memory is allocated: `slots` as the engine's StageModels do
// (each chunk keeps as many slots as its own peak, all held for the whole step; model/
// stage_model.h), `live` as a caching allocator does (Megatron, PyTorch: the rank holds at any time
// only the micro-batches in flight, so its peak is the largest sum over its chunks at one moment
// of the schedule). They differ only with several chunks per rank (interleaved, DualPipe).
enum class Allocation { kSlots, kLive };
std::string allocation_name(Allocation a);

struct Layout {
  int tp = 1, pp = 1, cp = 1, ep = 1, dp = 1;
  bool sp = true;  // sequence parallelism (Korthikanti 2205.05198 §4.2.2) when tp > 1
  int zero = 1;    // 0..3
  schedule::ScheduleKind schedule = schedule::ScheduleKind::k1F1B;
  int chunks = 1;  // v: interleaved chunks per rank (DualPipe: 2, its two copies)
  Partition partition = Partition::kEven;
  std::vector<int> stage_layers{};  // kExplicit: layers per pipeline stage (p x v of them)
  Recompute recompute = Recompute::kNone;
  bool norm_up = false;  // with recompute = kNone: DeepSeek-V3's norm-up recompute
  int micro_batch = 1;   // sequences per micro-batch
  Precision precision = Precision::kBf16;
  // Bytes per parameter besides the 2-byte weights and 4-byte fp32 master: gradients (4: fp32,
  // Megatron's main_grad, 18 bytes/param in all; 2: bf16, 16 bytes/param as in ZeRO §3.1) and
  // each Adam moment (4 fp32; 2 bf16 as DeepSeek-V3 §3.3.3 keeps them).
  int grad_bytes = 4, moment_bytes = 4;
  Allocation allocation = Allocation::kSlots;
  ActivationCache activation_cache = ActivationCache::kAuto;
  Ema ema = Ema::kNone;
  // How the software stack communicates (never searched; the published runs pin them):
  // context parallelism as the engine's ring (plan/context_ring.h) or as Llama 3 §3.3.2's
  // all-gather of K and V, exposed (cp_comm=ring|allgather); pipeline sends asynchronous, or
  // blocking each F and B as DeepSpeed's PipelineEngine does (p2p=async|blocking).
  bool cp_all_gather = false;
  bool blocking_p2p = false;

  bool sequence_parallel() const { return sp && tp > 1; }
  RecomputePolicy recompute_policy() const { return policy_of(recompute, norm_up); }
  std::string recompute_text() const;  // none, norm-up, selective, full
  std::string partition_text() const;  // even, balanced, or the explicit counts "3/4/.../2"
  // The cache in effect (kAuto resolved by the precision).
  bool fp8_activations() const {
    return activation_cache == ActivationCache::kFp8 ||
           (activation_cache == ActivationCache::kAuto &&
            (precision == Precision::kFp8 || precision == Precision::kFp4));
  }
  double optimizer_bytes() const { return 4.0 + 2.0 * moment_bytes; }  // master + 2 moments
  long gpus() const { return static_cast<long>(tp) * pp * cp * dp; }
  std::string to_string() const;
};

// Which fields a --layout string set, so the planner can search the rest.
struct LayoutFields {
  bool tp = false, pp = false, cp = false, ep = false, dp = false, zero = false, schedule = false,
       chunks = false, recompute = false, micro_batch = false, precision = false, sp = false,
       partition = false, grad = false, moments = false, allocation = false, act = false,
       ema = false, cp_comm = false, p2p = false;
};

// The --layout text of only the fields `f` marks (what a published run pins): parse_layout of it
// gives those fields back.
std::string fixed_layout_text(const Layout& l, const LayoutFields& f);

// Parses "tp=8,pp=16,dp=64,..."; unknown keys or bad values throw trillion::Error naming them.
// `what` names the option in messages ("--layout").
Layout parse_layout(const std::string& text, LayoutFields* fields = nullptr,
                    const std::string& what = "--layout");

}  // namespace trillion::plan
