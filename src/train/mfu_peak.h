// MFU's denominator: the peak of the GEMMs a run really executes, measured in the same run.
//
// A step's model FLOPs run in up to three kinds of GEMM: the blocks' linear layers through the
// precision recipe (model/linear_gemm.h: fp32, bf16 on oneDNN or emulated through the fp32
// GEMM, or the emulated block-scaled fp8/fp4 product), the blocks a low-precision recipe keeps in
// bf16, and everything else in fp32 (attention scores, the output head, the MoE router). Each
// kind's peak is measured as that kind's GEMM runs in training (LinearPrecision's forward GEMM of
// a square size), and the run's peak is the rate the step's FLOP mix would reach if every FLOP
// ran at its kind's peak:
//   peak = F / (F_fp32 / P_fp32 + F_recipe / P_recipe + F_bf16 / P_bf16)
// so an fp32 run divides by the fp32 peak, a bf16 run with native bf16 mostly by the bf16 one,
// and an emulated recipe by what its emulation reaches (said in describe()).
//
// Invariant: mfu() never returns more than 1. A peak measured on a busy machine is too low
// (`scripts/demo.sh` once measured 97.6 GFLOP/s against 196 idle and printed MFU 136.8%): when a
// step beats the peak, the peak is measured again (at most every kRemeasureSteps steps), and if
// the step still beats it, the step's own rate is the peak (the best this machine has been seen
// to do); describe() says which happened.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "plan/model_spec.h"
#include "precision/bf16_blocks.h"
#include "precision/recipe.h"

namespace trillion {

// Model FLOPs per token by the kind of GEMM that runs them.
struct GemmMix {
  double fp32 = 0;    // attention scores, output head (unless precision.head = bf16), router
  double recipe = 0;  // the blocks' linear layers under the run's recipe (a bf16 head: bf16's)
  double bf16 = 0;    // blocks a low-precision recipe keeps in bf16; its bf16 head
  double total() const { return fp32 + recipe + bf16; }
};

// The mix of a model's model_flops_per_token (plan/model_spec.h) under `recipe` with
// `bf16_blocks` kept in bf16, the output head in bf16 where `head_bf16` (precision.head).
// Blocks are weighted equally (a first-dense MoE model's dense and MoE blocks differ a little;
// the re-measure rule above covers any error this makes).
GemmMix gemm_mix(const plan::ModelSpec& model, int64_t seq_len, const precision::Recipe& recipe,
                 const precision::Bf16Blocks& bf16_blocks, bool head_bf16 = false);

class MfuPeak {
 public:
  static constexpr int64_t kRemeasureSteps = 50;

  MfuPeak() = default;
  MfuPeak(GemmMix mix, precision::Recipe recipe);
  // Measures every kind the mix runs (per process, with the backend's threads), keeping the best
  // of this and earlier measurements per kind. size 0: the training probe's sizes
  // (measure_training_gemm_peak); else `reps` GEMMs of size^3.
  void measure(int64_t size = 0, int reps = 0);
  // The job's peak in GFLOP/s for `processes` processes (each measured alike).
  double gflops(int processes = 1) const;
  // The fp32 GEMM's peak per process (what `bench gemm` measures).
  double fp32_gflops() const { return fp32_; }
  // The measured peak per process of the bf16 GEMM on oneDNN where this run executes one (the
  // bf16 recipe, or blocks a low-precision recipe keeps in bf16), else 0.
  double onednn_bf16_gflops() const;
  // MFU of a step that reached `achieved` model GFLOP/s over `processes` processes; raises the
  // peak as the header says when the step beats it. Never more than 1.
  double mfu(double achieved, int processes, int64_t step);
  // MFU of a rate without raising the peak (a run's average: never above its best step's).
  double mfu_of_rate(double achieved, int processes) const {
    return std::min(1.0, achieved / std::max(processes, 1) / gflops());
  }
  // e.g. "peak 191.3 GFLOP/s per process: fp32 GEMM" or "peak 402.2 GFLOP/s per process:
  // bf16 GEMM (oneDNN) 612.0 for 88% of the FLOPs, fp32 GEMM 190.1 for 12%; raised to the
  // step's own rate at step 7".
  std::string describe() const;
  // What the recipe's GEMM is ("bf16 GEMM (oneDNN)", "fp32 GEMM on bf16-rounded operands
  // (emulated: ...)"), for JSON.
  std::string recipe_kind() const;
  // For progress lines: "191 GFLOP/s fp32" or "402 GFLOP/s bf16+fp32, raised" (job total).
  std::string label(int processes) const;
  const std::string& note() const { return note_; }

  // For tests: pretend the measurements at `step` gave these per-process peaks.
  void set_measured(double fp32, double recipe, double bf16, int64_t step);

 private:
  GemmMix mix_;
  precision::Recipe recipe_;
  double fp32_ = 0, recipe_peak_ = 0, bf16_ = 0;
  double floor_ = 0;  // the best step rate per process that beat the measured peaks
  int64_t last_measured_step_ = -1;
  std::string note_;
  double measured_gflops() const;  // the blend of the measured peaks, per process
};

}  // namespace trillion
