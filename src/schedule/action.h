// Pipeline schedules as data: an Action is one step a pipeline rank takes (compute F/B/W on one
// micro-batch of one model chunk, or send/receive its activation or gradient), and a Schedule is
// one ordered list of actions per rank plus the map from (rank, chunk) to pipeline stage. The
// same lists are drawn by `trillion schedule`, simulated by the planner and (later) run by the
// engine's pipeline executor, so nothing here knows about communication libraries.
//
// Invariants: B is the input-gradient half of the backward (dgrad) and W the weight-gradient half
// (wgrad); schedules that do not split the backward emit W right after its B. Every action's stage
// is on the action's rank. Text form (torch.distributed.pipelining style): "<stage><kind><mb>",
// e.g. "2F0" = stage 2 forward of micro-batch 0, "3SEND_F1", "4RECV_B7".
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace trillion::schedule {

enum class ActionKind { kForward, kBackwardInput, kBackwardWeight, kSendF, kRecvF, kSendB, kRecvB };

// "F", "B", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B".
std::string_view kind_name(ActionKind kind);
bool is_compute(ActionKind kind);

// How a compute action groups with the one after it (the generators' marks, kept so the
// executor runs what was scheduled): a B fused with the W that follows it (one unsplit backward),
// or an F overlapped with the B that follows it (DualPipe's F&B pair).
enum class ActionGroup : uint8_t { kAlone, kFusedWithNextW, kPairedWithNextB };

struct Action {
  int rank = 0;
  ActionKind kind = ActionKind::kForward;
  int microbatch = 0;
  int chunk = 0;  // which of the rank's model chunks (0..v-1)
  int stage = 0;  // position of that chunk in the micro-batch's path through the pipeline
  ActionGroup group = ActionGroup::kAlone;
  bool operator==(const Action&) const = default;
};

// "2F0"; the rank is implied by the list the action sits in.
std::string to_string(const Action& a);
// Parses the text form; the caller supplies the rank; chunk is left 0 (Schedule::chunk_of fills
// it). Throws trillion::Error naming the text on a malformed action.
Action parse_action(std::string_view text, int rank);

// Time of one full-stage op (the work of 1/p of one model copy on one micro-batch) and of one
// point-to-point transfer. A chunk's ops cost chunk_fraction times these.
struct OpCosts {
  double forward = 1.0;          // T_F
  double backward_input = 1.0;   // T_B (dgrad)
  double backward_weight = 1.0;  // T_W (wgrad)
  double comm = 0.0;             // latency of one activation/gradient send between ranks
};

enum class ScheduleKind { kGPipe, k1F1B, kInterleaved, kZbH1, kZbH2, kDualPipe };

// "gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "dualpipe"; unknown names throw with the list.
std::string_view schedule_kind_name(ScheduleKind kind);
ScheduleKind parse_schedule_kind(std::string_view name);

// Where a micro-batch's stage lives.
struct Placement {
  int rank = 0;
  int chunk = 0;
};

struct Schedule {
  ScheduleKind kind = ScheduleKind::k1F1B;
  int num_ranks = 0;         // p
  int num_microbatches = 0;  // m
  int num_chunks = 1;        // v, model chunks held by each rank
  // Fraction of one rank's full share of the model (1/p of one model copy) that a chunk holds:
  // 1/v for interleaved, 1 for the others (DualPipe's two chunks are full stages of two copies).
  double chunk_fraction = 1.0;
  // paths[d][s] = where stage s of a micro-batch on path d runs; path_of[mb] picks d. Only
  // DualPipe has two paths (one per direction).
  std::vector<std::vector<Placement>> paths;
  std::vector<int> path_of;
  std::vector<std::vector<Action>> actions;  // [rank] in execution order

  const std::vector<Placement>& path(int microbatch) const { return paths[path_of[microbatch]]; }
  int num_stages(int microbatch) const { return static_cast<int>(path(microbatch).size()); }
  int chunk_of(int microbatch, int stage) const { return path(microbatch)[stage].chunk; }
  // One line per rank: "rank 0: 0F0 0SEND_F0 ...".
  std::string to_text() const;
};

}  // namespace trillion::schedule
