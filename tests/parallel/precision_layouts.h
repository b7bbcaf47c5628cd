// Shared by the precision layout tests (precision_parallel_test.cpp, precision_pipeline_test.cpp,
// precision_checkpoint_test.cpp): a run of a recipe at some layout against the one-process run of
// the same recipe, through `trillion compare` (losses and final weights), with the differences it
// measured printed (docs/precision.md's compositions table quotes them) and the tolerance the
// recipe's formats give for a layout that quantises some tiles differently.
//
// Which layouts are bitwise, and why the others are not:
// - bf16 rounds element by element: data, tensor and pipeline parallelism change only the fp32
//   accumulation order, as they do for fp32 itself (DESIGN.md principle 1), but that noise flips
//   the rounding of any element lying at a bf16 midpoint — dp 2's reduction order in the next
//   step's weight copy (3 steps: max 4.4e-5 against fp32's own 4.9e-7), DualPipe's sum of the
//   two copies' gradients likewise — and context parallelism much more: ring attention sums
//   dK/dV over the ranks' query chunks in another order, and dV is a sum that cancels, so its
//   fp32 noise flips some bf16 roundings of wv's wgrad operand (one step, SGD lr 1: gradients
//   within 3.6e-6 of one process's, fp32 within 1.5e-8). A re-rounding at bf16's u, bounded as
//   below. Schedules that keep the one-process order of every addition (1F1B, interleaved,
//   ZB-H1) stay bitwise, for every recipe.
// - fp8 / mxfp4 / nvfp4 tile the wgrad GEMM's K (the tokens) in 1x128 / 1x32 / 1x16 blocks and
//   nvfp4 takes one tensor scale from the whole operand: data and context parallelism hand a rank
//   fewer tokens (other tiles, other amaxes), tensor parallelism cuts the weights' and features'
//   tiles at the shard edges, and the fp4 recipes' stochastic rounding draws per element of the
//   local operand. Pipelines keep whole micro-batches per stage and the rounding stream is keyed
//   by the GEMM's site (model/linear_gemm.h): the same tiles and draws (asserted bitwise).
// A layout that rounds some operands differently is held to bounds derived from the element
// format's unit roundoff u (half its significand spacing: bf16 2^-8, E4M3 2^-4, E2M1 2^-2) and
// AdamW (retile_bounds below; tests/parallel/precision_*_test.cpp print the measured values):
// - every weight: AdamW moves an element by at most lr_t a_t at step t, a_t = (1 - beta1) /
//   sqrt(1 - beta2) sqrt(sum_{k<t} (beta1^2 / beta2)^k) sqrt(1 - beta2^t) / (1 - beta1^t)
//   (Cauchy-Schwarz on m_t and v_t's sums, bias corrections included; 1.00 to 1.01 over the first
//   steps at beta 0.9 / 0.95), so two runs from one init differ by at most 2 sum_t lr_t a_t. An
//   element whose gradient is near zero reaches it when the other rounding flips its sign (Adam
//   normalises |g| away), and the measured maxima do come within 10% of it: this bound says only
//   that no update went wrong;
// - the RMS weight difference, the discriminating check: an element's update m/sqrt(v) changes
//   by about the relative change of its gradient, at most u, so RMS <= u x 2 sum_t lr_t a_t. (A
//   rank that skipped the reduction, or trained on other tokens, moves the RMS to ~lr per step.)
// - each step's loss: the weights' difference enters to first order as g . dw, a projection of a
//   rounding-noise vector of RMS r on the gradient, whose spread is |g| r: three of them, with r
//   the RMS bound after the steps before (|g| = the step's grad_norm in metrics.jsonl). Where the
//   forward GEMMs themselves re-tile (tp's shard edges, nvfp4's tensor scale), the logits' part
//   that the blocks compute is perturbed by a relative u: the loss's excess over the uniform
//   prediction, |L - ln V|, moves by at most 2u of itself (first and second order of the
//   softmax). Plus fp32's own 1e-5.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../train/cli_util.h"
#include "train/checkpoint/checkpoint.h"

namespace trillion::testing {

// What `trillion compare` measured, plus the RMS of the final weights' difference.
struct RunDiffs {
  int exit_code = -1;
  std::string output;
  double loss = NAN, weight = NAN, weight_rms = NAN;
  bool bitwise = false;
};

// The final weights (newest checkpoint) of a run directory as fp32 values.
inline std::vector<float> final_weights(const std::string& run_dir) {
  const std::vector<std::string> dirs = list_checkpoints(run_dir);
  if (dirs.empty()) return {};
  const CheckpointWeights w = read_checkpoint_weights(dirs.front());
  std::vector<float> out(w.bytes.size() / sizeof(float));
  std::memcpy(out.data(), w.bytes.data(), out.size() * sizeof(float));
  return out;
}

inline RunDiffs compare_runs(const std::string& a, const std::string& b, double tol) {
  RunDiffs d;
  const CommandResult r = run_trillion("compare " + a + " " + b + " --tol " + std::to_string(tol));
  d.exit_code = r.exit_code;
  d.output = r.output;
  const size_t at = r.output.rfind("max |loss diff| ");
  if (at != std::string::npos) {
    std::sscanf(r.output.c_str() + at, "max |loss diff| %lf, max |weight diff| %lf", &d.loss,
                &d.weight);
  }
  d.bitwise = has(r.output, "(bitwise equal)");
  const std::vector<float> wa = final_weights(a), wb = final_weights(b);
  if (!wa.empty() && wa.size() == wb.size()) {
    double sum = 0;
    for (size_t i = 0; i < wa.size(); ++i) {
      const double e = static_cast<double>(wa[i]) - wb[i];
      sum += e * e;
    }
    d.weight_rms = std::sqrt(sum / static_cast<double>(wa.size()));
  }
  return d;
}

// The unit roundoff of a recipe's element format (half the spacing of the significands): bf16
// 2^-8, E4M3 2^-4, E2M1 2^-2.
inline double unit_roundoff(const std::string& recipe) {
  if (recipe == "bf16") return std::ldexp(1.0, -8);
  if (recipe == "fp8") return std::ldexp(1.0, -4);
  if (recipe == "mxfp4" || recipe == "nvfp4") return std::ldexp(1.0, -2);
  return std::ldexp(1.0, -24);
}

// bf16 gradients summed from parts: each part is rounded, then the sum — two roundings, each at
// most u of what it rounds, and the parts can exceed their sum where they cancel; the bound takes
// the parts at up to twice the sum (in RMS): 4u. Measured RMS at 21-25% of it (dp, cp, dp x tp,
// interleaved) and 46% (DualPipe) (tests/parallel/precision_{parallel,pipeline}_test.cpp); at 1u
// DualPipe would fail and dp / cp pass with 5-15% to spare. A run that drops a part sits at ~lr,
// 25x above
// (DualPipe's copies were summed from the empty fp32 buffer until this bound caught it:
// RMS 3.0e-3).
constexpr double kBf16GradientRoundings = 4;

// The bounds above for a run of `recipe` against `reference` (its metrics.jsonl gives lr,
// grad_norm and loss per step); params: the model's parameter count, vocab its V.
struct RetileBounds {
  double weight_max = 0, weight_rms = 0;
  std::vector<double> loss;  // per logged step
};
// `roundings`: the multiple of the recipe's u by which a layout may round each value differently
// from one process: 1, or kBf16GradientRoundings for bf16 gradients that a layout sums from parts
// (dp / cp ranks, DualPipe's two copies, interleaved's chunks) under a recipe whose own u is
// bf16's.
inline RetileBounds retile_bounds(const std::string& recipe, const std::string& reference,
                                  bool forward_retiles, double roundings = 1, double vocab = 64,
                                  double beta1 = 0.9, double beta2 = 0.95) {
  const double u = roundings * unit_roundoff(recipe);
  RetileBounds b;
  double moved = 0, ratio_sum = 0;  // 2 sum lr_t a_t over the steps so far
  int t = 0;
  for (const auto& m : read_metrics(reference)) {
    ++t;
    const double loss = m["loss"].get<double>();
    // Step t's loss is measured at the weights after t - 1 updates.
    b.loss.push_back(1e-5 + 3 * m["grad_norm"].get<double>() * u * moved +
                     (forward_retiles ? 2 * u * std::fabs(loss - std::log(vocab)) : 0.0));
    ratio_sum += std::pow(beta1 * beta1 / beta2, t - 1);
    const double a = (1 - beta1) / std::sqrt(1 - beta2) * std::sqrt(ratio_sum) *
                     std::sqrt(1 - std::pow(beta2, t)) / (1 - std::pow(beta1, t));
    moved += 2 * m["lr"].get<double>() * a;
  }
  b.weight_max = moved;
  b.weight_rms = u * moved;
  return b;
}

// Asserts a run of `recipe` matches `reference` within retile_bounds; returns the measured diffs.
inline RunDiffs expect_within_retile_bounds(const std::string& recipe, const std::string& reference,
                                            const std::string& run, bool forward_retiles,
                                            double roundings = 1) {
  const RetileBounds bound = retile_bounds(recipe, reference, forward_retiles, roundings);
  RunDiffs d = compare_runs(reference, run, bound.weight_max);
  EXPECT_EQ(d.exit_code, 0) << d.output;
  EXPECT_LE(d.weight_rms, bound.weight_rms) << d.output;
  const auto a = read_metrics(reference), b = read_metrics(run);
  EXPECT_EQ(b.size(), a.size());
  for (size_t s = 0; s < std::min(a.size(), b.size()); ++s) {
    const double la = a[s]["loss"], lb = b[s]["loss"];
    EXPECT_LE(std::fabs(la - lb), bound.loss[s]) << "step " << s + 1 << "\n" << d.output;
  }
  std::printf("[precision bounds] weight max %.3e, weight RMS %.3e, loss per step:",
              bound.weight_max, bound.weight_rms);
  for (double l : bound.loss) std::printf(" %.3e", l);
  std::printf("\n");
  return d;
}

// Prints what a layout's comparison measured (one line per test, for the docs' table).
inline void report(const std::string& what, const RunDiffs& d) {
  std::printf(
      "[precision layout] %s: max |loss diff| %.3e, max |weight diff| %.3e, RMS weight "
      "diff %.3e%s\n",
      what.c_str(), d.loss, d.weight, d.weight_rms, d.bitwise ? " (bitwise)" : "");
}

}  // namespace trillion::testing
