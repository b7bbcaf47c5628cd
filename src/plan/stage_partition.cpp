// See stage_partition.h.
#include "plan/stage_partition.h"

#include <fmt/format.h>

#include "core/error.h"

namespace trillion::plan {

std::vector<StageUnits> partition_stages(int64_t n_layers, int n_stages) {
  if (n_stages < 1 || n_stages > n_layers) {
    throw Error(fmt::format("{} pipeline stage(s) for {} layer(s): need 1 <= stages <= layers "
                            "(every stage holds at least one whole layer)",
                            n_stages, n_layers));
  }
  std::vector<StageUnits> out;
  const int64_t base = n_layers / n_stages, extra = n_layers % n_stages;
  int64_t next_layer = 0;
  for (int s = 0; s < n_stages; ++s) {
    const int64_t count = base + (s < extra ? 1 : 0);
    StageUnits u;
    u.first_unit = s == 0 ? 0 : static_cast<int>(1 + next_layer);
    next_layer += count;
    u.last_unit = static_cast<int>(next_layer);  // unit of the stage's last layer
    if (s == n_stages - 1) u.last_unit += 1;     // + the head
    out.push_back(u);
  }
  return out;
}

}  // namespace trillion::plan
