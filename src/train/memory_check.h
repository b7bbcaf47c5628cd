// The early memory check: before anything is allocated, the run's own plan of bytes per process
// (the in-memory token datasets, weights, gradients, optimizer moments and activations, from the
// same parameter table and activation formula the engine allocates by) is compared with the
// memory this machine can give, so an impossible run is one line instead of an allocation that
// grows until the kernel kills the process. The plan is a lower bound (it leaves out scratch,
// communication buffers and allocator overhead), so it never refuses a run that would fit.
#pragma once

#include <cstdint>
#include <string>

#include "train/run_config.h"

namespace trillion {

struct MemoryPlan {
  double data = 0;         // token datasets generated in memory (file shards are mapped)
  double weights = 0;      // this process's parameters (ZeRO-3: its shard)
  double gradients = 0;    // (ZeRO-2/3: its shard)
  double optimizer = 0;    // both Adam/LAMB moments (ZeRO-1/2/3: its shard)
  double activations = 0;  // one micro-batch of the first stage's stored activations
  double total() const { return data + weights + gradients + optimizer + activations; }
  std::string describe() const;  // "1.2 GiB (data 0.5 GiB, weights ...)"
};

MemoryPlan plan_process_memory(const RunConfig& config);

// The bytes this machine can still give: MemAvailable, capped by the cgroup's memory.max minus
// its current use where a limit is set. 0 when neither can be read.
double available_memory_bytes();

// The number of this job's processes on this machine (Open MPI's local size; 1 otherwise).
int local_process_count();

// Throws Error ("out of memory: ...", bytes by category vs available) when the plan of every
// local process does not fit, unless allow_oversubscribe. Returns the plan.
MemoryPlan check_memory(const RunConfig& config, bool allow_oversubscribe);

}  // namespace trillion
