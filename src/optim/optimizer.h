// The optimizer interface shared by AdamW and LAMB, and the segments they update. An optimizer
// updates a list of segments — pieces of table tensors — each with its own offsets into the
// parameter buffer, the gradient buffer and the optimizer-state buffers, because under ZeRO those
// three are laid out differently (full table layout or this rank's shard). One process: one
// segment per tensor, all three offsets equal to the tensor's table offset (full_segments).
// Invariant: segments of one tensor are listed in increasing element order; state buffers hold
// state_elements elements and every segment's state range lies inside them.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "backend/backend.h"
#include "core/tensor_table.h"

namespace trillion {

struct OptimSegment {
  int spec = 0;              // index in the TensorTable (weight-decay flag, per-tensor norms)
  int64_t param_offset = 0;  // elements into the parameter buffer passed to step()
  int64_t grad_offset = 0;   // elements into the gradient buffer passed to step()
  int64_t state_offset = 0;  // elements into the optimizer's moment buffers
  int64_t length = 0;
};

// One segment per table tensor at its own offset: the one-process layout.
std::vector<OptimSegment> full_segments(const TensorTable& table);

// Sums a vector of partial sums over every rank that holds a piece of the same tensors (the dp
// group under ZeRO); identity in one process. LAMB needs it for per-tensor norms across shards.
using SumAcrossRanks = std::function<void(std::vector<double>&)>;

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of every segment with learning rate lr; increments the step count.
  virtual void step(const Buffer& params, const Buffer& grads, double lr) = 0;
  virtual Buffer& first_moment() = 0;
  virtual Buffer& second_moment() = 0;
  virtual int64_t steps_taken() const = 0;
  virtual void set_steps_taken(int64_t s) = 0;
};

}  // namespace trillion
