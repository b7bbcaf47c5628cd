// PipelineExecutor: runs one rank's list of a schedule (schedule/action.h) over the rank's stage
// models, one per chunk — the only place the engine's micro-batch loop lives. The one-process
// step is the one-stage schedule (p = 1: F B W per micro-batch); several chunks on one rank hand
// activations and their gradients over in memory.
//
//   F(mb, c)  takes a free activation slot of chunk c, feeds it (tokens on the first stage, the
//             previous stage's output otherwise, targets on the last) and runs the forward
//   B(mb, c)  runs the backward of that slot: fused with its W (one pass, dgrad + wgrad layer by
//             layer) when the W directly follows it in the list and the stage is not split; else
//             backward_input. Then hands dL/d(input) to the previous stage's slot
//   W(mb, c)  backward_weight, unless fused into its B; frees the slot
//
// Invariants: no per-schedule code — any valid action list runs; a slot is reused only after its
// micro-batch's W; the stages' slot counts must cover schedule::inflight_slots (checked).
#pragma once

#include <functional>
#include <vector>

#include "model/stage_model.h"
#include "schedule/action.h"

namespace trillion::parallel {

// Fills tokens and targets ([N] each) of micro-batch `micro` of the current step.
using MicroBatchSource = std::function<void(int64_t micro, int32_t* tokens, int32_t* targets)>;

class PipelineExecutor {
 public:
  // stages[c] runs chunk c of `rank`; the schedule must stay alive.
  PipelineExecutor(const schedule::Schedule& schedule, int rank, std::vector<StageModel*> stages,
                   Backend& backend);

  // Runs the rank's actions for one step. grad_scale = dL/dloss per position (1 / global tokens
  // of the step). Returns, per micro-batch, the sum of its per-position losses (0 when this rank
  // holds no head).
  std::vector<double> run(const MicroBatchSource& batches, double grad_scale);

 private:
  int take_slot(int chunk);
  const schedule::Schedule& schedule_;
  int rank_;
  Backend& be_;
  std::vector<StageModel*> stages_;
  std::vector<std::vector<int>> free_;     // [chunk]: free slots
  std::vector<std::vector<int>> slot_of_;  // [chunk][mb]: slot in use, or -1
  std::vector<char> fused_;                // per action of the rank's list: B fused with next W
};

}  // namespace trillion::parallel
