// Between a rank's parameter layout (its TensorTable: the units of its stages, each tensor cut to
// its tp/ep shard) and the one-process layout (the global table): what checkpoints, `compare`
// and resuming under another layout read and write. A tensor of the rank's table lands at the
// global positions of its shard (core/tensor_table.h: global_element_index), so summing every
// contributing rank's placement over the model-parallel ranks assembles the whole model; a
// tensor held by several ranks (replicated over tp, DualPipe's two copies) is contributed by one.
#pragma once

#include <functional>

#include "backend/backend.h"
#include "core/tensor_table.h"

namespace trillion::parallel {

// For every spec of `local` that `contribute(spec index)` accepts, copies its elements from
// `local_data` (in the local layout) to their positions in `global_data` (global layout). Other
// elements of global_data are left as they are.
void local_to_global(Backend& be, const TensorTable& local, const ShardCoord& coord,
                     const Buffer& local_data, const TensorTable& global, const Buffer& global_data,
                     const std::function<bool(int spec)>& contribute);

// Every contiguous run of a local tensor in the global layout: f(spec, local offset, global
// offset, elements), in table order. What sharded checkpoints map their ranges with.
void for_each_global_run(const TensorTable& local, const ShardCoord& coord,
                         const TensorTable& global,
                         const std::function<void(int, int64_t, int64_t, int64_t)>& f);

// The inverse: fills every spec of `local` from the global layout.
void global_to_local(Backend& be, const TensorTable& global, const Buffer& global_data,
                     const TensorTable& local, const ShardCoord& coord, const Buffer& local_data);

}  // namespace trillion::parallel
