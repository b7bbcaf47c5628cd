// The GEMMs of the blocks' linear layers, run through the run's precision recipe
// (precision/recipe.h): C = alpha * op(A) op(B) + beta * C as Backend::gemm defines it, with the
// operands rounded as the recipe says for the pass (forward, dgrad, wgrad) and the product
// accumulated in fp32. Without a recipe (ParallelContext::precision null), with the fp32 recipe
// or on f64 tensors (gradient checks) it is exactly Backend::gemm.
//   bf16          both operands rounded to bf16 (nearest even) into temporaries, then the
//                 backend's fp32 GEMM: exact bf16-input emulation, fp32 accumulation; where
//                 oneDNN and native bf16 are available (backend/cpu/onednn_bf16.h), oneDNN's
//                 bf16 matmul on the same bf16 operands instead (only the fp32 accumulation
//                 order differs).
//   block_scaled  op(A) as [M, K] and op(B)^T as [N, K] quantised with the pass's rules along K
//                 (precision/block_scaling.h), multiplied by precision::scaled_gemm (bitwise the
//                 kernel definition), then C = alpha * product + beta * C in fp32. With the
//                 recipe's wgrad_hadamard, the wgrad pass first multiplies both operands' K
//                 blocks by one random Hadamard matrix (precision/hadamard.h; K zero-padded to
//                 its size), whose signs depend only on the run's seed.
// Weights: a recipe other than fp32 reads bf16 weights (the low-precision recipes quantise those
// bf16 values, as DeepSeek-V3's Figure 6 casts BF16 weights to FP8). In training the ZeRO store
// keeps the bf16 copy and binds every unit to its fp32-widened values (parallel/mixed_weights.h),
// which round to bf16 exactly; where the model's buffer is the fp32 master instead (MoE, DiLoCo:
// train/run_config.h recipe_weights_in_store), attach_weights keeps a bf16 copy of it here
// (memory category `parameters`, 2 bytes per parameter, as plan/ counts it), refreshed before each
// step and each evaluation. A weight view outside an attached master is rounded to bf16 on the
// fly.
// Blocks kept in bf16 (precision/bf16_blocks.h): a GEMM of a block the run keeps in bf16 (its
// global layer index, which every layer passes) is exactly the bf16 recipe's GEMM above, in all
// three passes, on the same bf16 weight copy; it draws no random numbers.
// Stochastic rounding (the fp4 recipes' gradients) draws from Philox keyed by (seed, step,
// micro-batch, layer, pass, the call's index among that layer's calls of the pass): the site the
// caller names (set_site; model/stage_model.cpp names each layer of each micro-batch). The key
// does not depend on the order a schedule runs the calls in, so a pipeline (any schedule, split
// backward or not) rounds as the one-process run does, and a run repeats and resumes bitwise
// (fp32, bf16 and fp8 have no randomness). Element i of the quantised operand uses uniform(i).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "core/memory.h"
#include "precision/hadamard.h"
#include "precision/recipe.h"

namespace trillion {

struct ParallelContext;

// The layer index of a GEMM outside the model's blocks (unit tests, benchmarks): the recipe's.
constexpr int64_t kNoLayer = -1;

class LinearPrecision {
 public:
  // bf16_blocks: of a model of n_layers blocks, those whose GEMMs run the bf16 recipe.
  // head_bf16: the output head's GEMMs run the bf16 recipe (head_gemm), else fp32.
  LinearPrecision(const precision::Recipe& recipe, uint64_t seed,
                  precision::Bf16Blocks bf16_blocks = {}, int64_t n_layers = 0,
                  bool head_bf16 = false);
  const precision::Recipe& recipe() const { return recipe_; }
  const precision::Bf16Blocks& bf16_blocks() const { return bf16_blocks_; }
  bool in_bf16(int64_t layer) const {
    return precision::in_bf16_blocks(bf16_blocks_, layer, n_layers_);
  }
  // Restarts the stochastic-rounding stream for optimizer step `step` (call before its first
  // micro-batch).
  // Also refreshes the bf16 weight copy.
  void begin_step(int64_t step) {
    step_ = step;
    set_site(0, 0);
    refresh_weights();
  }
  // The GEMMs that follow belong to layer `layer` of micro-batch `microbatch` of the step.
  void set_site(int64_t microbatch, int64_t layer) {
    microbatch_ = microbatch, layer_ = layer;
    calls_[0] = calls_[1] = calls_[2] = 0;
  }
  // Allocates the bf16 copy of `master` (the fp32 parameter buffer, which must outlive this).
  void attach_weights(const Buffer& master, MemoryTracker& tracker);
  // Where a precision recipe's parameter store keeps the bf16 values of the fp32 weights it
  // binds (parallel::ParameterStore::bf16_weights): the GEMMs read those instead of rounding
  // the widened fp32 weights on every call (the same values: the widened copy is exact).
  using WeightSource = std::function<const bf16*(const float* fp32, int64_t count)>;
  void set_weight_source(WeightSource source) { weight_source_ = std::move(source); }
  void refresh_weights();  // copy = bf16(master)

  // layer: the GEMM's global block index (kNoLayer: none; the recipe's format).
  void gemm(Backend& be, precision::GemmPass pass, Tensor C, bool ta, bool tb, const Tensor& A,
            const Tensor& B, double alpha, double beta, int64_t layer = kNoLayer);
  // An output head GEMM: the bf16 recipe's GEMM where precision.head = "bf16", else the
  // backend's fp32 GEMM exactly.
  bool head_in_bf16() const { return head_bf16_; }
  void head_gemm(Backend& be, precision::GemmPass pass, Tensor C, bool ta, bool tb, const Tensor& A,
                 const Tensor& B, double alpha, double beta) const;

 private:
  // The weight operand [rows, cols] as fp32 values of bf16 numbers (from the copy when it lies
  // in the master buffer).
  std::vector<float> weight_values(const Tensor& W) const;
  // W's first element in the bf16 copy when W lies in the master buffer, or in the store's bf16
  // values (weight_source_), else null.
  const bf16* weight_in_copy(const Tensor& W) const;
  // The bf16 recipe through oneDNN (backend/cpu/onednn_bf16.h): same operands, native bf16 dot
  // products with fp32 accumulation. Reports its operand roundings and the GEMM to
  // be.record_external (what `bench step --profile` shows of them).
  void bf16_gemm_onednn(Backend& be, precision::GemmPass pass, Tensor C, bool ta, bool tb,
                        const Tensor& A, const Tensor& B, double alpha, double beta) const;
  // The bf16 recipe's GEMM (oneDNN where available, else the emulation).
  void bf16_gemm(Backend& be, precision::GemmPass pass, Tensor C, bool ta, bool tb, const Tensor& A,
                 const Tensor& B, double alpha, double beta) const;

  precision::Recipe recipe_;
  uint64_t seed_;
  precision::Bf16Blocks bf16_blocks_;
  int64_t n_layers_;
  bool head_bf16_;
  std::optional<precision::RandomHadamard> wgrad_rht_;  // when recipe_.wgrad_hadamard > 0
  const Buffer* master_ = nullptr;
  WeightSource weight_source_;
  Buffer copy_;  // bf16, same layout as *master_
  int64_t step_ = 0, microbatch_ = 0, layer_ = 0;
  int64_t calls_[3] = {0, 0, 0};  // stochastic calls of the site, per GemmPass
};

// Backend::gemm through ctx.precision (see above), for a GEMM of global block `layer`.
void linear_gemm(const ParallelContext& ctx, int64_t layer, Backend& be, precision::GemmPass pass,
                 Tensor C, bool ta, bool tb, const Tensor& A, const Tensor& B, double alpha,
                 double beta);

}  // namespace trillion
