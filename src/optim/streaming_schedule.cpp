// See streaming_schedule.h.
#include "optim/streaming_schedule.h"

#include <fmt/format.h>

#include "core/error.h"

namespace trillion {

FragmentSchedule::FragmentSchedule(const StreamingConfig& c, int n_layers)
    : config_(c), n_layers_(n_layers) {
  if (c.inner_steps < 1) {
    throw Error(fmt::format("diloco.inner_steps = {} must be >= 1", c.inner_steps));
  }
  if (c.fragments < 1 || c.inner_steps % c.fragments != 0) {
    throw Error(fmt::format(
        "diloco.fragments = {} must be >= 1 and divide diloco.inner_steps = {} (fragments "
        "synchronise inner_steps/fragments steps apart)",
        c.fragments, c.inner_steps));
  }
  if (c.fragments > n_layers) {
    throw Error(
        fmt::format("diloco.fragments = {} exceeds the model's {} layers (a fragment is "
                    "a set of layers)",
                    c.fragments, n_layers));
  }
  const int spacing = c.inner_steps / c.fragments;
  if (c.overlap_steps < 0 || c.overlap_steps > spacing) {
    throw Error(fmt::format(
        "diloco.overlap_steps = {} must be between 0 and inner_steps/fragments = {} (an exchange "
        "must land before the next one starts)",
        c.overlap_steps, spacing));
  }
  if (!(c.mixing >= 0 && c.mixing <= 1)) {
    throw Error(fmt::format("diloco.mixing = {} must be in [0, 1]", c.mixing));
  }
}

int FragmentSchedule::fragment_of_layer(int layer) const {
  TRILLION_CHECK(layer >= 0 && layer < n_layers_, "layer outside the model");
  if (config_.pattern == FragmentPattern::strided) return layer % config_.fragments;
  // Sequential: contiguous blocks, the first n_layers % F of them one layer longer.
  const int f = config_.fragments, base = n_layers_ / f, extra = n_layers_ % f;
  const int long_layers = extra * (base + 1);
  return layer < long_layers ? layer / (base + 1) : extra + (layer - long_layers) / base;
}

std::vector<int> FragmentSchedule::layers_of(int fragment) const {
  std::vector<int> layers;
  for (int l = 0; l < n_layers_; ++l) {
    if (fragment_of_layer(l) == fragment) layers.push_back(l);
  }
  return layers;
}

int64_t FragmentSchedule::send_step(int fragment, int64_t k) const {
  const int64_t spacing = config_.inner_steps / config_.fragments;
  return (fragment + 1) * spacing + k * config_.inner_steps;
}

std::vector<int> FragmentSchedule::sends_after(int64_t step) const {
  std::vector<int> out;
  const int64_t spacing = config_.inner_steps / config_.fragments;
  if (step < spacing || step % spacing != 0) return out;
  // step = (p + 1) spacing + k H  <=>  p = (step / spacing - 1) mod F
  out.push_back(static_cast<int>((step / spacing - 1) % config_.fragments));
  return out;
}

std::vector<int> FragmentSchedule::merges_after(int64_t step) const {
  return sends_after(step - config_.overlap_steps);
}

void merge_fragment(float* local, const float* global, int64_t n, double mixing) {
  const float a = static_cast<float>(mixing), b = static_cast<float>(1 - mixing);
  for (int64_t i = 0; i < n; ++i) local[i] = a * local[i] + b * global[i];
}

}  // namespace trillion
