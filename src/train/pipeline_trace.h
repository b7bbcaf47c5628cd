// The measured timeline of a pipeline step: every compute action of every pipeline rank with its
// start and end, the activation slots each rank used at most, and what the simulator predicts for
// the same schedule. Written as trace.json (Chrome trace-event format: one track per rank, one
// event per action with micro-batch, chunk and stage in its args; Perfetto and chrome://tracing
// read it) and summarised in summary.json's `pipeline` section; `trillion schedule --from-trace`
// draws it like a simulated schedule.
// Invariants: times are seconds from the earliest start in the step (all ranks of one machine
// share the steady clock); a B fused with its W is one event (its W is not listed).
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "schedule/simulator.h"
#include "train/step_runner.h"

namespace trillion {

struct PipelineTrace {
  schedule::ScheduleKind kind = schedule::ScheduleKind::k1F1B;
  int ranks = 1, chunks = 1, microbatches = 1;
  std::vector<std::vector<schedule::TimedAction>> timeline;  // [pp rank]
  std::vector<std::vector<int>> peak_slots;                  // [pp rank][chunk], measured
  std::vector<std::vector<int>> schedule_slots;              // [pp rank][chunk], inflight_slots
  std::vector<int64_t> pp_sent_bytes;  // [pp rank]: bytes the executor sent over pp, last step
};

// The last step's trace of every pipeline rank (collective over the runner's pp group).
PipelineTrace gather_pipeline_trace(StepRunner& runner);

// Makespan, busy time per rank and bubble fraction of a measured timeline.
schedule::Simulation measured_simulation(const PipelineTrace& trace);
// Mean F, B and W durations of one full stage (chunk durations divided by the schedule's chunk
// fraction): the costs to feed the simulator. A fused B+W counts as B with W = 0.
schedule::OpCosts measured_costs(const PipelineTrace& trace, double chunk_fraction);
// Mean F, B and W durations of each rank's chunks (stages differ: embedding, head and loss).
schedule::ChunkCosts measured_chunk_costs(const PipelineTrace& trace);

nlohmann::json chrome_trace(const PipelineTrace& trace);
// Reads chrome_trace()'s output back (throws Error naming what is missing).
PipelineTrace read_chrome_trace(const nlohmann::json& json);

// summary.json's `pipeline`: schedule, pp, chunks, micro-batches, measured and simulated bubble
// (with unit costs and with the measured costs), step time measured vs simulated, and per-rank
// slots measured vs the schedule's, and per-rank bytes sent over pp by the last step's actions.
nlohmann::json pipeline_summary(const PipelineTrace& trace, const schedule::Schedule& schedule);

}  // namespace trillion
