// bf16 gradient storage (`precision.grad_dtype = "bf16"`): the gradients a rank keeps between
// passes, and reduces over dp, are bf16 — 2 bytes per parameter instead of 4, the ZeRO paper's
// 16 bytes/parameter of mixed-precision Adam (1910.02054 §3.1: 2 + 2 + 4 + 4 + 4), and half the
// bytes on the wire. Megatron keeps fp32 main gradients by default (18 bytes/parameter); that is
// grad_dtype = "fp32", the default.
//
// The layers still write fp32 gradients (`+=` in fp32 within one micro-batch, model/ files): a
// bucket's units are bound to a temporary fp32 accumulator (workspace) from the bucket's first
// backward use until every unit of it has finished the micro-batch; its sum is then rounded
// once into bf16 — accumulated into the kept gradients, g = bf16(g + micro-batch) (ZeRO 0-1), or
// rounded for the micro-batch's reduce-scatter (ZeRO 2-3, whose shard then accumulates
// g = bf16(g + reduced chunk)). One rounding per micro-batch rather than per layer write keeps
// the within-micro-batch sums (many tokens) exact to fp32, and no fp32 copy of a whole model's
// gradients is ever held. The dp reduction runs on bf16 (comm/mpi_communicator.cpp's bf16 sum:
// each addition in fp32, rounded to bf16).
//
//   stage   kept bf16 gradients      reduction
//   0       whole                    all-reduce per bucket (bf16)
//   1       whole (owned part read)  reduce-scatter per bucket, this rank's chunk copied back
//   2, 3    this rank's shard        reduce-scatter per bucket and micro-batch
//
// Invariants: a bucket's accumulator exists only between its first writing pass of a
// micro-batch and end_micro_batch(); padding of the shard stays zero.
#pragma once

#include <memory>

#include "parallel/zero.h"

namespace trillion::parallel {

std::unique_ptr<GradientStore> make_bf16_gradient_store(int stage, ParameterSet& params,
                                                        comm::Communicator& dp, Backend& be,
                                                        MemoryTracker& tracker,
                                                        const BucketPlan& plan);

}  // namespace trillion::parallel
