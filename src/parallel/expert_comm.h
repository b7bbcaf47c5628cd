// Expert parallelism's communication: the all-to-all exchange that moves each routed row to the
// rank holding its expert and the expert's output back (model/moe.h's ExpertExchange over the
// mesh's ep group). Experts are split in equal contiguous blocks: rank r of the ep group holds
// global experts [r E/ep, (r + 1) E/ep). Per micro-batch and MoE layer:
//   plan      the per-expert row counts travel first (an all-to-all of E/ep counts per peer)
//   dispatch  rows in global expert order (so grouped by destination) go out in one all-to-all
//             with per-rank counts; they arrive grouped by source and are reordered expert-major
//   combine   the reverse reordering and all-to-all
// The backward pass uses the same two movements for the output and input gradients. Bytes a rank
// sends per layer and micro-batch (the Communicator's all-to-all counters count only rows to
// other ranks): 2 (R_out + R_in) C e — dispatch sends the R_out rows it routes to other ranks'
// experts, combine sends back the R_in rows other ranks routed to its experts, once forward and
// once backward — plus the count exchange, (ep - 1) E/ep f64 counts. Summed over the ep group,
// sum R_out = sum R_in = the assignments (tokens x top-k, dropless) whose expert is remote.
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
  // The routed rows of the plans since the last call (for the byte formula).
  struct RowCounts {
    int64_t out = 0;    // rows this rank routed to other ranks' experts
    int64_t in = 0;     // rows other ranks routed to this rank's experts
    int64_t local = 0;  // rows this rank routed to its own experts
    int64_t plans = 0;  // exchanges planned (MoE layers x micro-batches run here)
  };
  RowCounts take_row_counts();

 private:
  // Source-major [src][local expert] blocks <-> expert-major [local expert][src] blocks.
  void reorder(const ExchangePlan& p, const Tensor& from, const Tensor& to, bool to_expert_major);
  comm::Communicator& ep_;
  Backend& be_;
  MemoryTracker& tracker_;
  int64_t local_;
  RowCounts rows_;
};

}  // namespace trillion::parallel
