// How a model's units are cut into pipeline stages: the one partition the engine's StageModels
// use and the planner reads. Units are 0 (embedding), 1 + l (layer l) and L + 1 (head); stage s of
// S holds a contiguous run of them, the embedding on stage 0 and the head on stage S - 1. Layers
// are spread as evenly as whole layers allow: every stage gets floor(L / S) and the first L mod S
// stages one more.
// Invariant: the stages cover units 0..L+1 exactly once, in order; throws Error when S < 1 or
// S > L (a stage without a layer).
#pragma once

#include <cstdint>
#include <vector>

namespace trillion::plan {

struct StageUnits {
  int first_unit = 0, last_unit = 0;  // inclusive
};

std::vector<StageUnits> partition_stages(int64_t n_layers, int n_stages);

}  // namespace trillion::plan
