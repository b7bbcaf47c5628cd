// What StepRunner derives from a RunConfig before it allocates: the checks that this build trains
// the layout and that each group has the processes it names, this rank's ParallelContext, the
// training schedule and its forward-only twin for validation, which stages (and layer units) a
// pipeline rank holds, the data-parallel options, the learning-rate schedule and AdamW's constants.
// Invariants: pure functions of the config (and of group sizes and ranks); every refusal is an
// Error naming the keys and the fix, thrown before anything is allocated.
#pragma once

#include <vector>

#include "comm/communicator.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "parallel/context.h"
#include "parallel/data.h"
#include "plan/stage_partition.h"
#include "schedule/action.h"
#include "train/run_config.h"

namespace trillion {

// `g` itself when it has `degree` processes, as parallel.`key` says (the launcher started the
// right number of processes).
comm::Communicator& checked_group(comm::Communicator& g, int64_t degree, const char* key);

// `c` itself when this build trains its layout (the others are shown by `trillion inspect`).
const RunConfig& checked_layout(const RunConfig& c);

// Whether the routed experts take the tp ranks as extra expert-parallel ranks (MoE with tp > 1
// and parallel.expert_tp = 1): the mesh's ep group then spans tp x ep, and MoE layers route each
// rank's N/tp sequence-parallel rows.
bool experts_over_tp(const RunConfig& c);
// Whether every routed expert is split over tp along its width (MoE with tp > 1 and
// parallel.expert_tp = tp).
bool experts_split_over_tp(const RunConfig& c);

// This rank's shape and groups: micro_batch / dp sequences, sharded over tp and cp.
ParallelContext context_of(const RunConfig& c, int dp, comm::Communicator& tp,
                           comm::Communicator& cp);

// The training step's schedule (parallel.schedule over pp ranks, grad_accum micro-batches).
schedule::Schedule schedule_of(const RunConfig& c);

// One micro-batch's forward through the pipeline, along the first path (validation).
schedule::Schedule forward_only(const schedule::Schedule& train);

// The stages a pipeline rank runs, one per chunk, where the schedule's paths place them.
struct RankStages {
  std::vector<plan::StageUnits> partition;  // [stage] its units, for the whole pipeline
  std::vector<int> stage_of_chunk;          // [chunk of this rank] its stage
  const plan::StageUnits& of_chunk(int chunk) const { return partition[stage_of_chunk[chunk]]; }
  bool holds(int unit) const;  // whether one of this rank's stages holds `unit`
};
// stage_layers: parallel.partition's counts ({} for the even split).
RankStages rank_stages(const schedule::Schedule& s, int64_t n_layers,
                       const std::vector<int>& stage_layers, int rank);

// ZeRO stage, bucket size in elements, overlap and micro-batches per step; the rest is the
// runner's to fill.
parallel::DataParallelOptions parallel_options(const RunConfig& c);

LrSchedule lr_schedule_of(const RunConfig& c);
AdamWConfig adamw_config(const OptimConfig& o);

}  // namespace trillion
