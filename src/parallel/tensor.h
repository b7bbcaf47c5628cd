// Tensor parallelism at the step (the per-layer algorithm is in model/block.h, lm_head.h and
// embedding.h; its communication in tensor_comm.h): what the optimizer step needs over the tp
// group once the micro-batches' gradients are reduced over dp.
//   - The gradients of tensors replicated over tp (the norm weights; every other tensor of our
//     Llama block is a tp shard) are partial sums over the rank's N/tp token rows under sequence
//     parallelism: sum them over tp (one all-reduce of all of them). Without SP every tp rank
//     computed them whole and identical: nothing to do. MLA's replicated down-projections and
//     latent norms (role attention) are partial over the rank's heads: summed with or without
//     SP.
//   - The global gradient norm counts each parameter once: the shards' squares are summed over
//     tp, the replicated tensors' taken from one tp rank.
// It works on the optimizer's view of the gradients (segments over optimizer_grads), so it is
// the same under every ZeRO stage: tp ranks of one dp coordinate have identical tables and
// buckets, hence identical segments.
#pragma once

#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "core/tensor_table.h"
#include "optim/optimizer.h"

namespace trillion::parallel {

class TensorParallel {
 public:
  // segments: the optimizer's (DataParallel::segments) over `table`, this rank's local table.
  // experts_sharded: the routed experts differ per tp rank (parallel.expert_tp), like tp shards.
  TensorParallel(comm::Communicator& tp, bool sequence_parallel, const TensorTable& table,
                 const std::vector<OptimSegment>& segments, Backend& backend,
                 bool experts_sharded = false);

  // Sums the replicated tensors' gradient pieces in `grads` (the optimizer's gradient buffer)
  // over tp, in place (without SP only MLA's).
  void reduce_replicated_gradients(const Buffer& grads);
  // The sum of squares over the tp group, each parameter once, from this rank's `sum_sq` (over
  // every tensor it holds, as DataParallel::gradient_sum_squares gives it) and `replicated_sq`
  // (the replicated tensors' part of it, summed over dp alike).
  double global_sum_squares(double sum_sq, double replicated_sq);
  // This rank's squares of the replicated tensors' pieces in `grads`.
  double replicated_sum_squares(const Buffer& grads) const;

 private:
  comm::Communicator& tp_;
  bool sp_;
  Backend& be_;
  std::vector<OptimSegment> replicated_;  // the segments of tensors not split over tp
  std::vector<OptimSegment> partial_;     // those whose gradients are partial sums over tp
  int64_t partial_elements_ = 0;
};

}  // namespace trillion::parallel
