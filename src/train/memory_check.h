// The early memory check: before anything is allocated, the run's own plan of bytes per process
// (the in-memory token datasets; weights, gradients and optimizer state as the engine stores them
// for the precision recipe and ZeRO stage, from plan/'s per-rank parameters and
// zero_model_states; activations and ring-attention buffers from the engine's formulas; what a
// checkpoint write holds) is compared with the memory this machine can give, so an impossible
// run is one line instead of an allocation that grows until the kernel kills the process. The
// model states and the checkpoint term equal the engine's allocation when ZeRO's buckets divide
// by dp (tests/train/memory_check_test.cpp); the plan is otherwise a lower bound (it leaves out
// scratch, communication buffers, bucket padding and allocator overhead), so it never refuses a
// run that would fit.
#pragma once

#include <cstdint>
#include <string>

#include "train/run_config.h"

namespace trillion {

struct MemoryPlan {
  double data = 0;         // token datasets generated in memory (file shards are mapped)
  double weights = 0;      // this process's parameters (ZeRO-3: its shard; a recipe's bf16 copy)
  double gradients = 0;    // (ZeRO-2/3: its shard; bf16 with precision.grad_dtype = "bf16")
  double optimizer = 0;    // the moments (ZeRO-1/2/3: their shard) and a recipe's fp32 master
  double activations = 0;  // one micro-batch of the first stage's stored activations (T/cp rows)
  double context = 0;      // ring attention's K/V and dK/dV blocks (cp > 1)
  double checkpoint = 0;   // held beyond the state while a checkpoint is written (see below)
  double total() const {
    return data + weights + gradients + optimizer + activations + context + checkpoint;
  }
  std::string describe() const;  // "1.2 GiB (data 0.5 GiB, weights ...)"
};

// The model states of the busiest pipeline rank (tp rank 0: it also holds the replicated
// tensors) by the engine's storage of the precision recipe, and the checkpoint's extra bytes of
// the rank that owns the most.
MemoryPlan plan_process_memory(const RunConfig& config);

// What writing a checkpoint holds beyond a rank's state (train/checkpoint/writer.h) when the
// rank owns `owned` elements of the model (StepRunner::owned_runs) of `global` in all and holds
// `local` in its buffers: sync, the write buffer capped at the owned part; async, the snapshot of
// the owned parameters and each moment; DiLoCo, the gathered outer model and moments plus the
// local staging of one gather (a lower bound: the gathers' own shard temporaries are left out).
double checkpoint_extra_bytes(const RunConfig& config, int64_t owned, int64_t global,
                              int64_t local);

// The bytes this machine can still give: MemAvailable, capped by the cgroup's memory.max minus
// its current use where a limit is set. 0 when neither can be read.
double available_memory_bytes();

// The number of this job's processes on this machine (Open MPI's local size; 1 otherwise).
int local_process_count();

// Throws Error ("out of memory: ...", bytes by category vs available) when the plan of every
// local process does not fit, unless allow_oversubscribe. Returns the plan.
MemoryPlan check_memory(const RunConfig& config, bool allow_oversubscribe);

}  // namespace trillion
