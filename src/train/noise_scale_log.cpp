// See noise_scale_log.h. Every rank computes the same averages from the same all-reduced sums;
// the lead's are written.
#include "train/noise_scale_log.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace trillion {

std::optional<double> NoiseScaleLog::update(const StepStats& st) {
  if (!st.noise_valid) return std::nullopt;
  estimator_.update(st.noise);
  return last();
}

std::optional<double> NoiseScaleLog::last() const {
  if (!estimator_.last().valid) return std::nullopt;
  return estimator_.last().b_simple;
}

void NoiseScaleLog::save(std::vector<CheckpointFile>& files) {
  const NoiseScaleEstimator::State s = estimator_.state();
  // Doubles as hex floats round-trip exactly.
  const nlohmann::json j{{"ema_gradient_sq", fmt::format("{:a}", s.ema_gradient_sq)},
                         {"ema_trace", fmt::format("{:a}", s.ema_trace)},
                         {"steps", s.steps}};
  files.push_back({"noise_scale.json", j.dump(2)});
}

void NoiseScaleLog::load(const std::string& checkpoint_dir) {
  const auto text = read_checkpoint_file(checkpoint_dir, "noise_scale.json");
  if (!text) return;  // a checkpoint from before the estimator: its averages start afresh
  const auto j = nlohmann::json::parse(*text);
  NoiseScaleEstimator::State s;
  s.ema_gradient_sq = std::strtod(j.at("ema_gradient_sq").get<std::string>().c_str(), nullptr);
  s.ema_trace = std::strtod(j.at("ema_trace").get<std::string>().c_str(), nullptr);
  s.steps = j.at("steps").get<int64_t>();
  estimator_.set_state(s);
}

}  // namespace trillion
