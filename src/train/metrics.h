// What a run reports: the JSON of one step's metrics (metrics.jsonl), memory by category and per
// rank, communication bytes per group and kind, and the human progress line. Every number a user
// sees is computed here once, with its unit.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "comm/communicator.h"
#include "core/memory.h"
#include "plan/model_spec.h"

namespace trillion {

// Peak bytes per memory category.
nlohmann::json memory_json(const MemoryTracker& tracker);
// Bytes sent per collective kind, under the group's name (kinds with traffic only).
nlohmann::json comm_json(const std::string& group, const comm::CommCounters& counters);
// Every rank's current and peak bytes per category, gathered over the world (collective), and,
// beside them, what plan/ predicts for the rank where it is given (>= 0): its activation bytes
// ("predicted": {"activations": ...}) and the part of its workspace that ring attention's
// buffers take ("workspace_context_ring", plan/context_ring.h; the rest of the workspace, kernel
// and stage scratch, is not predicted).
nlohmann::json memory_per_rank(comm::Communicator& world, const MemoryTracker& tracker,
                               double predicted_activations = -1,
                               double predicted_ring_buffers = -1);

// Ring attention's load balance over a run (collective over the world): every rank's causal
// attention FLOPs in its forward passes (`forward_flops`: 4 HD per visible (query, key) pair and
// head, counted by parallel/context.h), and the worst cp group's max / mean of them (1 when the
// split balances the causal work; contiguous's > 1). Ranks of one cp group share (pp, dp, tp).
nlohmann::json ring_balance_json(comm::Communicator& world, comm::Communicator& cp,
                                 double forward_flops);

// "1h02m", "3m07s", "12s".
std::string format_duration(double seconds);
// A fraction as a percentage with three significant digits, so a tiny model's MFU is not
// "0.0%": "41.3%", "2.07%", "0.0123%".
std::string format_percent(double fraction);
// Wall-clock time, seconds since the Unix epoch (each metrics line carries it).
double unix_seconds();

// Model FLOPs per token of a run and the convention they follow, for MFU.
struct MfuConvention {
  double flops_per_token = 0;
  plan::AttentionFlops attention = plan::AttentionFlops::kCausal;
  // e.g. "model FLOPs 6N + 6·L·h·s per token (causal attention)".
  std::string describe() const;
};
MfuConvention mfu_convention(const plan::ModelSpec& model, int64_t seq_len,
                             plan::AttentionFlops attention = plan::AttentionFlops::kCausal);

}  // namespace trillion
