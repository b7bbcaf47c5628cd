// The gradient noise scale of a run (McCandlish et al. 1812.06162; optim/noise_scale.h), from the
// measurements each step already makes (StepStats::noise: the dp ranks' or micro-batches'
// gradients and the step's), averaged over steps; logged as `gradient_noise_scale` (tokens) in
// metrics.jsonl and summary.json. Its moving averages are checkpointed (noise_scale.json), so a
// resumed run logs the same values as an uninterrupted one.
#pragma once

#include <optional>

#include "optim/noise_scale.h"
#include "train/checkpoint/resume.h"

namespace trillion {

class NoiseScaleLog : public CheckpointPart {
 public:
  explicit NoiseScaleLog(double decay) : estimator_(decay) {}
  // B_simple in tokens once the averages allow it (their |G|^2 is positive), else nullopt; also
  // nullopt for a step without two gradient estimates.
  std::optional<double> update(const StepStats& st);
  std::optional<double> last() const;

  void save(std::vector<CheckpointFile>& files) override;
  void load(const std::string& checkpoint_dir) override;

 private:
  NoiseScaleEstimator estimator_;
};

}  // namespace trillion
