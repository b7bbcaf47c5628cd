// Tensor parallelism's communication (Megatron-LM, Shoeybi et al. 1909.08053; sequence
// parallelism, Korthikanti et al. 2205.05198): the partner pairs that enter and leave a
// tensor-parallel region. Each pair's backward is the other's forward:
//   copy_to_tp        forward identity             backward all-reduce (sum) over tp
//   reduce_from_tp    forward all-reduce over tp   backward identity
//   all_gather_sp     forward all-gather rows      backward reduce-scatter rows
//   reduce_scatter_sp forward reduce-scatter rows  backward all-gather rows
// Without sequence parallelism (SP) a column-parallel GEMM's input goes through copy_to_tp and a
// row-parallel GEMM's partial output through reduce_from_tp; with SP the residual stream holds
// only this rank's slice of the N = B*T token rows (rank r: rows [r N/tp, (r+1) N/tp), for B = 1
// exactly the T/tp sequence slice), all_gather_sp replaces copy_to_tp and reduce_scatter_sp
// replaces reduce_from_tp. The volumes are the same (all-reduce = reduce-scatter + all-gather),
// counted by the Communicator's counters of the tp group.
//
// Invariants: a null communicator (or a group of one) is the identity: gathers and scatters copy,
// reductions do nothing, nothing is counted. Header-only: the model's modules call it and the
// model library sits below parallel/ (it needs only comm/).
#pragma once

#include <cstring>

#include "comm/communicator.h"
#include "core/error.h"

namespace trillion::parallel {

inline int tp_size(const comm::Communicator* tp) {
  return tp == nullptr ? 1 : tp->size();
}

// copy_to_tp: the forward is the identity (every rank already holds x).
inline void copy_to_tp_forward(comm::Communicator*, const Tensor&) {}
// copy_to_tp backward: dx of a column-parallel GEMM is a partial sum; sum it over tp in place.
inline void copy_to_tp_backward(comm::Communicator* tp, const Tensor& dx) {
  if (tp_size(tp) > 1) tp->all_reduce(dx);
}
// reduce_from_tp forward: a row-parallel GEMM's partial output, summed over tp in place.
inline void reduce_from_tp_forward(comm::Communicator* tp, const Tensor& y) {
  if (tp_size(tp) > 1) tp->all_reduce(y);
}
// reduce_from_tp backward: the identity (every rank needs the whole dy).
inline void reduce_from_tp_backward(comm::Communicator*, const Tensor&) {}

// all_gather_sp forward: full [N, C] from every rank's slice [N/tp, C], in rank order.
inline void all_gather_sp_forward(comm::Communicator* tp, const Tensor& slice,
                                  const Tensor& full) {
  TRILLION_CHECK(full.numel() == slice.numel() * tp_size(tp), "all_gather_sp: sizes");
  if (tp_size(tp) > 1) {
    tp->all_gather(slice, full);
  } else if (full.raw() != slice.raw()) {
    std::memcpy(full.raw(), slice.raw(), slice.numel() * dtype_size(slice.dtype()));
  }
}
// all_gather_sp backward: the slice's gradient is the sum over tp of its rows of d_full.
inline void all_gather_sp_backward(comm::Communicator* tp, const Tensor& d_full,
                                   const Tensor& d_slice) {
  TRILLION_CHECK(d_full.numel() == d_slice.numel() * tp_size(tp), "all_gather_sp: sizes");
  if (tp_size(tp) > 1) {
    tp->reduce_scatter(d_full, d_slice);
  } else if (d_full.raw() != d_slice.raw()) {
    std::memcpy(d_slice.raw(), d_full.raw(), d_full.numel() * dtype_size(d_full.dtype()));
  }
}
// reduce_scatter_sp forward: this rank's rows of the sum over tp of the partial [N, C].
inline void reduce_scatter_sp_forward(comm::Communicator* tp, const Tensor& partial,
                                      const Tensor& slice) {
  all_gather_sp_backward(tp, partial, slice);
}
// reduce_scatter_sp backward: every rank needs the whole d_y: gather the slices' gradients.
inline void reduce_scatter_sp_backward(comm::Communicator* tp, const Tensor& d_slice,
                                       const Tensor& d_full) {
  all_gather_sp_forward(tp, d_slice, d_full);
}

}  // namespace trillion::parallel
