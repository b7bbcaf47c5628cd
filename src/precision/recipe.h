// Precision recipes as data: for each of a linear layer's three GEMMs (forward y = x W^T, dgrad
// dx = dy W, wgrad dW += dy^T x), how each operand is rounded before an fp32-accumulated
// product. Only the linear layers of the blocks (wqkv, wo, w_gate_up, w_down, the MoE experts
// and shared experts) take a recipe; the embedding, output head, norms, attention core
// (softmax(QK^T)V) and MoE router stay in the engine's dtype (fp32), as DeepSeek-V3 (2412.19437
// §3.3) keeps them in BF16/FP32: they are a small share of the FLOPs and the most sensitive.
//   fp32   today's numbers bit for bit (no rounding at all).
//   bf16   both operands rounded to bf16 (round to nearest even), fp32 accumulation.
//   fp8    DeepSeek-V3 §3.3: E4M3 for every operand of the three GEMMs; activations and
//          gradients scaled per 1x128 tile along K, weights per 128x128 block, from the amax.
//   mxfp4  OCP MX 1.0: E2M1 in 1x32 blocks with E8M0 power-of-two scales (weights too: MX has
//          no 2-D blocks); gradients rounded stochastically (Tseng et al. 2502.20586: without it
//          the rounding bias of 4-bit gradients stalls training).
//   nvfp4  NVIDIA NVFP4 (2509.25149): E2M1 in 1x16 blocks with E4M3 scales and an fp32 tensor
//          scale; weights in 16x16 2-D blocks so W and W^T quantise alike; gradients rounded
//          stochastically; a 16x16 random Hadamard transform on both wgrad inputs along K
//          (precision/hadamard.h), not on forward and dgrad, as the paper applies it.
// mxfp4 has no Hadamard transform by default: measured on Brown it raised the final loss (+0.7%
// at seed 1) although one GEMM's error with outlier tokens fell (docs/precision.md); Tseng et
// al. run MXFP4 in the backward pass only, with their transform in it: another recipe.
// [precision] wgrad_hadamard turns it on for any block-scaled recipe.
// bf16 blocks (precision/bf16_blocks.h): the blocks whose linear layers run the bf16 recipe
// instead (all three GEMMs; their MoE experts too). nvfp4 keeps the first 2 and last 8 of 62,
// scaled to the model's depth (2509.25149 §4.1, appendix A.1: the 12B model); mxfp4 the last 8
// of 52 (§5, appendix A.2: the paper's MXFP4 runs, the same share as its NVFP4 ones; Tseng et
// al. keep no block but run the whole forward pass in BF16, a recipe not taken here); fp8 none
// (DeepSeek-V3 quantises every block's linear layers). [precision] bf16_blocks overrides.
// Invariant: tile_cols of the two operands of a pass are equal (the K block, the accumulation
// interval of the emulated kernel, precision/scaled_gemm.h).
#pragma once

#include <string>
#include <vector>

#include "precision/bf16_blocks.h"
#include "precision/block_scaling.h"

namespace trillion::precision {

enum class Rounding { none, bf16, block_scaled };

// The three GEMMs of a linear layer. Operands: forward (A = activations x, B = weights W);
// dgrad (A = output gradients dy, B = W); wgrad (A = dy^T, B = x^T, both along the tokens).
enum class GemmPass { forward, dgrad, wgrad };

struct OperandRule {
  MiniFormat format = MiniFormat::e4m3;
  Scaling scaling = Scaling::kAmax;
  int64_t tile_rows = 1, tile_cols = 128;  // along the operand's [rows, K] layout
  bool stochastic = false;                 // stochastic rounding (gradients of the fp4 recipes)
};

struct Recipe {
  std::string name;
  Rounding rounding = Rounding::none;
  // block_scaled only: the rule of each operand role.
  OperandRule activation, weight, gradient;
  // Bytes per parameter of the compute copy of the weights (plan/'s weight bytes): 4 for fp32
  // (the master is the compute copy), 2 otherwise (bf16 weights beside the fp32 master).
  int weight_bytes = 4;
  // The size of the random Hadamard transform applied to both wgrad operands along K before
  // quantisation (precision/hadamard.h); 0: none. Block-scaled recipes only.
  int64_t wgrad_hadamard = 0;
  // The blocks kept in bf16, scaled to the model's depth (bf16_blocks_for). Block-scaled only.
  Bf16BlockRule bf16_blocks{};
};

// The recipe called `name`; throws Error listing the names otherwise.
const Recipe& recipe_named(const std::string& name);
const std::vector<std::string>& recipe_names();  // fp32, bf16, fp8, mxfp4, nvfp4

// recipe_named(name) with wgrad_hadamard replaced (kRecipeDefault: the recipe's own). Throws
// Error for a size RandomHadamard refuses, or a non-zero size on a recipe that rounds element
// by element (fp32, bf16: there is no block for the transform to spread an outlier over).
constexpr int64_t kRecipeDefault = -1;
Recipe recipe_with(const std::string& name, int64_t wgrad_hadamard);

// The blocks of a model of n_layers blocks kept in bf16 under r: r's rule, or override_text
// (parse_bf16_blocks) when it is not empty. Throws Error for a text parse_bf16_blocks refuses,
// counts that together exceed n_layers, or blocks kept under a recipe that is not block-scaled
// (fp32 has no bf16 weights to run them on; bf16 is bf16 already).
Bf16Blocks resolve_bf16_blocks(const Recipe& r, int64_t n_layers, const std::string& override_text);

// The planner's precision (plan/hardware.h: bf16, fp16, fp8, fp4) a recipe's GEMMs run at:
// fp32 -> "" (no planner precision: the planner models mixed precision only), bf16 -> bf16,
// fp8 -> fp8, mxfp4/nvfp4 -> fp4.
std::string planner_precision(const Recipe& r);

// The other way: the engine's [precision] settings that train what a plan's layout assumes
// (GEMM precision, gradient bytes, Adam moment bytes), for `trillion plan`'s report. bf16 ->
// recipe bf16, fp8 -> fp8, fp4 -> nvfp4 (mxfp4 is the other fp4 recipe); grad 2 bytes ->
// grad_dtype bf16. fp16 has no engine recipe (the engine has no fp16 with loss scaling), nor
// have bf16 moments (AdamW keeps fp32 moments: 12 bytes/parameter of master and moments, not 8):
// recipe is then empty and the note says why.
struct EngineRecipe {
  std::string recipe;      // "" when the engine has none
  std::string grad_dtype;  // fp32 | bf16
  std::string note;        // one line
};
EngineRecipe engine_recipe_for_plan(const std::string& planner_precision, int grad_bytes,
                                    int moment_bytes);

}  // namespace trillion::precision
