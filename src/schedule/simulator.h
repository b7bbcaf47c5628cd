// Plays a schedule with modelled op costs: each rank runs its list in order; an action starts
// when its rank is free and its inputs exist (a RECV waits for the matching SEND plus the
// communication latency; F needs its input, B needs its F and the downstream gradient, W needs
// its B). Returns the timeline, the bubble fraction and the peak in-flight activations per rank.
//
// Invariants: sends are asynchronous (zero time on the sender); compute costs scale by the
// schedule's chunk_fraction; a schedule that cannot finish throws trillion::Error naming the
// blocked actions (a deadlock), never loops forever.
#pragma once

#include <string>
#include <vector>

#include "schedule/action.h"

namespace trillion::schedule {

struct TimedAction {
  Action action;
  double start = 0.0;
  double end = 0.0;
};

struct Simulation {
  std::vector<std::vector<TimedAction>> timeline;  // [rank], in execution order
  double makespan = 0.0;                           // time of the last action's end
  std::vector<double> busy;                        // compute time per rank
  // Idle time over total time, summed over all ranks: sum_r (makespan - busy_r) / (p makespan).
  double bubble_fraction = 0.0;
  // Peak number of micro-batches whose activations a rank holds (F started, W not finished), in
  // units of one full stage's activations (a chunk counts chunk_fraction).
  std::vector<double> peak_inflight;
};

// record_timeline = false leaves timeline empty (faster: the planner needs only the numbers).
Simulation simulate(const Schedule& schedule, const OpCosts& costs, bool record_timeline = true);

// Costs of each rank's chunks ([rank][chunk], one chunk's F, B and W, not scaled by
// chunk_fraction), for replaying a measured run whose stages differ (the first holds the
// embedding, the last the head and loss); `comm` is the latency of one transfer.
using ChunkCosts = std::vector<std::vector<OpCosts>>;
Simulation simulate(const Schedule& schedule, const ChunkCosts& costs, double comm,
                    bool record_timeline = true);

// Activation slots rank `rank` needs per chunk: the most micro-batches of one chunk whose forward
// has run and whose weight gradient has not, walking the rank's list in order (its execution
// order). This is the simulator's in-flight count per chunk and what the engine's StageModel of
// that chunk allocates.
std::vector<int> inflight_slots(const Schedule& schedule, int rank);

// Every problem found, one sentence each; empty when the schedule is valid: each (micro-batch,
// stage) has exactly one F, B and W on the stage's rank, in that order; every SEND has its RECV
// on the neighbouring stage's rank and vice versa, a RECV precedes its consumer and a SEND
// follows its producer; and the schedule runs to completion (no deadlock) with unit costs.
std::vector<std::string> validate(const Schedule& schedule);

}  // namespace trillion::schedule
