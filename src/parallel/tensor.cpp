// See tensor.h.
#include "parallel/tensor.h"

namespace trillion::parallel {

TensorParallel::TensorParallel(comm::Communicator& tp, bool sequence_parallel,
                               const TensorTable& table, const std::vector<OptimSegment>& segments,
                               Backend& backend, bool experts_sharded)
    : tp_(tp), sp_(sequence_parallel), be_(backend) {
  for (const OptimSegment& s : segments) {
    const ShardGroup g = table.spec(s.spec).shard.group;
    if (s.length > 0 && g != ShardGroup::tp && !(experts_sharded && g == ShardGroup::ep)) {
      replicated_.push_back(s);
      // Replicated attention tensors are MLA's down-projections and latent norms: partial over
      // the rank's heads with or without SP.
      if (sp_ || table.spec(s.spec).role == TensorRole::attention) {
        partial_.push_back(s);
        partial_elements_ += s.length;
      }
    }
  }
}

void TensorParallel::reduce_replicated_gradients(const Buffer& grads) {
  if (tp_.size() == 1 || partial_elements_ == 0) return;
  // Packed into one message (in f64): one all-reduce per step, whatever the number of norms.
  std::vector<double> packed(partial_elements_);
  int64_t at = 0;
  for (const OptimSegment& s : partial_) {
    be_.copy(Tensor(packed.data() + at, DType::f64, {s.length}),
             grads.view(s.grad_offset, {s.length}));
    at += s.length;
  }
  tp_.all_reduce(Tensor(packed.data(), DType::f64, {partial_elements_}));
  at = 0;
  for (const OptimSegment& s : partial_) {
    be_.copy(grads.view(s.grad_offset, {s.length}),
             Tensor(packed.data() + at, DType::f64, {s.length}));
    at += s.length;
  }
}

double TensorParallel::replicated_sum_squares(const Buffer& grads) const {
  double sum = 0;
  for (const OptimSegment& s : replicated_)
    sum += be_.sum_squares(grads.view(s.grad_offset, {s.length}));
  return sum;
}

double TensorParallel::global_sum_squares(double sum_sq, double replicated_sq) {
  if (tp_.size() == 1) return sum_sq;
  double mine = tp_.rank() == 0 ? sum_sq : sum_sq - replicated_sq;
  tp_.all_reduce(Tensor(&mine, DType::f64, {1}));
  return mine;
}

}  // namespace trillion::parallel
