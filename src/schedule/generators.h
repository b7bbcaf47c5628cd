// Generators of pipeline schedules: per-rank action lists (compute plus the send/recv pairs that
// connect stages on different ranks) for GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-H2 and
// DualPipe. Each generator only decides the order of compute actions; communication actions are
// derived from the stage placement in one place (insert_communication), so every schedule gets
// them the same way.
//
// Invariants: every generated schedule passes validate() (validator.h); micro-batches on each
// stage run F in increasing micro-batch order and B in the same order.
#pragma once

#include "schedule/action.h"

namespace trillion::schedule {

// Throws trillion::Error naming the value for impossible shapes: p < 1, m < 1; interleaved needs
// v >= 2 and m a multiple of p (Megatron's grouping); DualPipe needs even p and m >= 2p, m even.
// costs matter only for zb-h1/zb-h2, whose order is found by list scheduling with those costs
// (as in Qi et al. 2401.10241 §3, which schedule from profiled T_F, T_B, T_W).
Schedule generate_schedule(ScheduleKind kind, int num_ranks, int num_microbatches,
                           int num_chunks = 1, const OpCosts& costs = {});

// Adds SEND/RECV actions around compute actions whose neighbouring stage is on another rank:
// RECV_F(mb,s) just before F(mb,s), SEND_F(mb,s) just after it; RECV_B(mb,s) before B(mb,s),
// SEND_B(mb,s) after it. marks[rank][i] (may be empty: all 0) groups actions that run as one
// unit, receiving before and sending after the group: 1 = a B fused with the W after it (an
// unsplit backward), 2 = an F overlapped with the B after it (DualPipe's F&B). A stage's
// neighbour on the same rank needs nothing.
void insert_communication(Schedule& schedule, const std::vector<std::vector<char>>& marks = {});

}  // namespace trillion::schedule
