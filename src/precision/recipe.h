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
// Invariant: tile_cols of the two operands of a pass are equal (the K block, the accumulation
// interval of the emulated kernel, precision/scaled_gemm.h).
#pragma once

#include <string>
#include <vector>

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
};

// The recipe called `name`; throws Error listing the names otherwise.
const Recipe& recipe_named(const std::string& name);
const std::vector<std::string>& recipe_names();  // fp32, bf16, fp8, mxfp4, nvfp4

// recipe_named(name) with wgrad_hadamard replaced (kRecipeDefault: the recipe's own). Throws
// Error for a size RandomHadamard refuses, or a non-zero size on a recipe that rounds element
// by element (fp32, bf16: there is no block for the transform to spread an outlier over).
constexpr int64_t kRecipeDefault = -1;
Recipe recipe_with(const std::string& name, int64_t wgrad_hadamard);

// The planner's precision (plan/hardware.h: bf16, fp16, fp8, fp4) a recipe's GEMMs run at:
// fp32 -> "" (no planner precision: the planner models mixed precision only), bf16 -> bf16,
// fp8 -> fp8, mxfp4/nvfp4 -> fp4.
std::string planner_precision(const Recipe& r);

}  // namespace trillion::precision
