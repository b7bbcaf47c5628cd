// Expert parallelism's communication: the all-to-all exchange that moves each routed row to the
// rank holding its expert and the expert's output back (model/moe.h's ExpertExchange over the
// mesh's ep group). Experts are split in equal contiguous blocks: rank r of the ep group holds
// global experts [r E/ep, (r + 1) E/ep). Per micro-batch and MoE layer:
//   plan      the per-expert row counts travel first (an all-to-all of E/ep counts per peer)
//   dispatch  rows in global expert order (so grouped by destination) go out in one all-to-all
//             with per-rank counts; they arrive grouped by source and are reordered expert-major
//   combine   the reverse reordering and all-to-all
// The backward pass uses the same two movements for the output and input gradients. Bytes per
// rank per layer and micro-batch (the Communicator's all-to-all counters, which count only rows
// to other ranks): forward (dispatch + combine) 2 R_remote C e + backward 2 R_remote C e, plus
// the count exchange, where R_remote is the rows this rank routes to other ranks' experts.
#pragma once

#include "comm/communicator.h"
#include "model/moe.h"

namespace trillion::parallel {

class AllToAllExchange final : public ExpertExchange {
 public:
  // ep: the expert-parallel group; experts: E (divisible by ep.size()).
  AllToAllExchange(comm::Communicator& ep, Backend& backend, MemoryTracker& tracker,
                   int64_t experts);
  int64_t first_expert() const override { return ep_.rank() * local_; }
  int64_t local_experts() const override { return local_; }
  ExchangePlan plan(const std::vector<int64_t>& rows_per_expert) override;
  void dispatch(const ExchangePlan& p, const Tensor& send, const Tensor& recv) override;
  void combine(const ExchangePlan& p, const Tensor& back, const Tensor& out) override;
  // Rows this rank sent to other ranks' experts since the last call (for the byte formula).
  int64_t take_remote_rows();

 private:
  // Source-major [src][local expert] blocks <-> expert-major [local expert][src] blocks.
  void reorder(const ExchangePlan& p, const Tensor& from, const Tensor& to, bool to_expert_major);
  comm::Communicator& ep_;
  Backend& be_;
  MemoryTracker& tracker_;
  int64_t local_;
  int64_t remote_rows_ = 0;
};

}  // namespace trillion::parallel
