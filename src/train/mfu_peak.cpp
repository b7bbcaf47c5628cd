// See mfu_peak.h.
#include "train/mfu_peak.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "backend/cpu/onednn_bf16.h"
#include "train/gemm_peak.h"

namespace trillion {

GemmMix gemm_mix(const plan::ModelSpec& model, int64_t seq_len, const precision::Recipe& recipe,
                 const precision::Bf16Blocks& bf16_blocks, bool head_bf16) {
  const plan::ModelCounts c = plan::count_model(model);
  const double total =
      plan::model_flops_per_token(model, seq_len, plan::AttentionFlops::kCausal);
  // Outside the recipe: the output head (V x C, tied or not), the routers, the scores.
  const double head = 6.0 * static_cast<double>(model.vocab) * model.d_model;
  const double router = 6.0 * static_cast<double>(c.router) * model.moe_layers();
  const double linear = std::max(0.0, total - head - router -
                                          model.n_layers * plan::attention_flops_per_token_layer(
                                                               model, seq_len,
                                                               plan::AttentionFlops::kCausal));
  GemmMix mix;
  mix.fp32 = total - linear;
  if (recipe.rounding == precision::Rounding::none) {
    mix.fp32 = total;
    return mix;
  }
  int64_t kept = 0;
  for (int64_t l = 0; l < model.n_layers; ++l) {
    kept += precision::in_bf16_blocks(bf16_blocks, l, model.n_layers) ? 1 : 0;
  }
  const double kept_share = model.n_layers > 0 ? static_cast<double>(kept) / model.n_layers : 0;
  mix.bf16 = linear * kept_share;
  mix.recipe = linear - mix.bf16;
  if (head_bf16) {  // the head's GEMMs run the bf16 recipe's (LinearPrecision::head_gemm)
    mix.fp32 -= head;
    (recipe.rounding == precision::Rounding::bf16 ? mix.recipe : mix.bf16) += head;
  }
  return mix;
}

MfuPeak::MfuPeak(GemmMix mix, precision::Recipe recipe)
    : mix_(mix), recipe_(std::move(recipe)) {}

void MfuPeak::measure(int64_t size, int reps) {
  auto fp32 = [&] { return size > 0 ? measure_gemm_peak(size, reps) : measure_training_gemm_peak(); };
  auto linear = [&](const precision::Recipe& r) {
    return size > 0 ? measure_linear_gemm_peak(r, size, reps)
                    : measure_training_linear_gemm_peak(r);
  };
  // TRILLION_PEAK_SLOWDOWN=F divides what is measured by F: a machine busy while it measured,
  // for the tests of the rule that keeps MFU at or below 1.
  const char* slowdown_text = std::getenv("TRILLION_PEAK_SLOWDOWN");
  const double slowdown = slowdown_text ? std::max(1.0, std::atof(slowdown_text)) : 1.0;
  fp32_ = std::max(fp32_, fp32().gflops / slowdown);
  if (mix_.recipe > 0) recipe_peak_ = std::max(recipe_peak_, linear(recipe_).gflops / slowdown);
  if (mix_.bf16 > 0) {
    bf16_ = std::max(bf16_, linear(precision::recipe_named("bf16")).gflops / slowdown);
  }
}

double MfuPeak::onednn_bf16_gflops() const {
  if (!onednn_bf16_available()) return 0;
  if (recipe_.rounding == precision::Rounding::bf16 && mix_.recipe > 0) return recipe_peak_;
  return mix_.bf16 > 0 ? bf16_ : 0;
}

void MfuPeak::set_measured(double fp32, double recipe, double bf16, int64_t step) {
  fp32_ = fp32, recipe_peak_ = recipe, bf16_ = bf16;
  last_measured_step_ = step;
}

double MfuPeak::measured_gflops() const {
  double seconds = 0;  // per GFLOP of the mix
  auto add = [&](double flops, double peak) {
    if (flops > 0) seconds += flops / std::max(peak, 1e-30);
  };
  add(mix_.fp32, fp32_);
  add(mix_.recipe, recipe_peak_);
  add(mix_.bf16, bf16_);
  return seconds > 0 ? mix_.total() / seconds : fp32_;
}

double MfuPeak::gflops(int processes) const {
  return std::max(measured_gflops(), floor_) * processes;
}

double MfuPeak::mfu(double achieved, int processes, int64_t step) {
  const double per_process = achieved / std::max(processes, 1);
  if (per_process > gflops() && (last_measured_step_ < 0 ||
                                 step - last_measured_step_ >= kRemeasureSteps)) {
    last_measured_step_ = step;
    measure();
    note_ = fmt::format("measured again at step {}", step);
  }
  if (per_process > gflops()) {
    floor_ = per_process;
    note_ = fmt::format("raised to the step's own rate at step {} (the peak measured at the "
                        "start was lower: a busy machine)",
                        step);
  }
  return per_process / gflops();
}

std::string MfuPeak::recipe_kind() const {
  switch (recipe_.rounding) {
    case precision::Rounding::none:
      return "fp32 GEMM";
    case precision::Rounding::bf16:
      return onednn_bf16_available()
                 ? "bf16 GEMM (oneDNN)"
                 : "fp32 GEMM on bf16-rounded operands (emulated: " + onednn_bf16_status() + ")";
    case precision::Rounding::block_scaled:
      return recipe_.name + " GEMM (emulated: quantise + block-scaled product)";
  }
  return "";
}

std::string MfuPeak::label(int processes) const {
  std::string kinds = "fp32";
  if (mix_.recipe > 0) {
    kinds = recipe_.rounding == precision::Rounding::bf16 && !onednn_bf16_available()
                ? "fp32 (bf16 emulated)"
                : recipe_.name + "+fp32";
    if (recipe_.rounding == precision::Rounding::block_scaled) kinds = recipe_.name + " emulated+fp32";
  }
  return fmt::format("{:.3g} GFLOP/s {}{}", gflops(processes), kinds, floor_ > 0 ? ", raised" : "");
}

std::string MfuPeak::describe() const {
  const double total = mix_.total();
  std::string parts;
  auto part = [&](const std::string& kind, double flops, double peak) {
    if (flops <= 0) return;
    if (!parts.empty()) parts += ", ";
    parts += fmt::format("{} {:.1f} for {:.0f}% of the FLOPs", kind, peak, 100 * flops / total);
  };
  std::string what;
  if (mix_.recipe <= 0 && mix_.bf16 <= 0) {
    what = "fp32 GEMM";
  } else {
    part(recipe_kind(), mix_.recipe, recipe_peak_);
    part("bf16 GEMM outside the recipe (blocks kept in bf16, a bf16 head)", mix_.bf16, bf16_);
    part("fp32 GEMM", mix_.fp32, fp32_);
    what = parts;
  }
  return fmt::format("peak {:.1f} GFLOP/s per process: {}{}", gflops(), what,
                     note_.empty() ? "" : "; " + note_);
}

}  // namespace trillion
