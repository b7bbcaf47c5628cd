// The parameter store of a precision recipe (precision/recipe.h) under any ZeRO stage: the fp32
// master weights (what the optimizer updates, with the Adam moments) and the bf16 compute copy
// (what every layer reads), each whole or sharded as ZeRO (Rajbhandari et al. 1910.02054 §5)
// shards the 2 + 12 bytes per parameter of mixed-precision Adam:
//
//   stage   fp32 master (optimizer)   bf16 compute copy (parameters)   after the update
//   0       whole                     whole                            copy = bf16(master)
//   1, 2    this rank's shard         whole                            all-gather bf16(shard)
//   3       this rank's shard         this rank's shard                copy = bf16(shard)
//
// The model never holds fp32 weights between passes: before a unit is used (acquire) its bf16
// weights (gathered over dp first under ZeRO-3, the next unit's gather prefetched) are widened
// into a temporary fp32 buffer (workspace) that the unit is bound to until release. Every layer
// therefore computes from the bf16 weights, the norms, embedding and head included, as Megatron's
// bf16 parameters with fp32 main params do; the recipe's rounding of activations and gradients
// stays in the linear layers (model/linear_gemm.h), which re-round the widened bf16 values
// exactly.
//
// Invariants: the copy always equals bf16 of the master after init, load and finish_step, on
// every rank and at every stage, so the stages compute the same numbers; a unit is bound only
// between acquire() and release(); padding of the shards stays zero.
#pragma once

#include <memory>

#include "parallel/zero.h"

namespace trillion::parallel {

std::unique_ptr<ParameterStore> make_mixed_precision_store(int stage, ParameterSet& params,
                                                           comm::Communicator& dp, Backend& be,
                                                           MemoryTracker& tracker,
                                                           const BucketPlan& plan);

}  // namespace trillion::parallel
