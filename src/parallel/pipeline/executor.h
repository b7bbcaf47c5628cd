// PipelineExecutor: runs one rank's list of a schedule (schedule/action.h) over the rank's stage
// models, one per chunk — the only place the engine's micro-batch loop lives, for every schedule
// kind (no per-schedule code). The one-process step is the one-stage schedule (F B W per
// micro-batch); chunks on one rank hand activations and gradients over in memory; stages on
// other ranks exchange them over the pp group with non-blocking sends and receives.
//
//   F(mb, c)  runs the forward of micro-batch mb on chunk c's stage in a free activation slot
//             (fed with tokens on the first stage, the previous stage's output otherwise, targets
//             on the last)
//   B(mb, c)  its backward: fused with its W (one pass, dgrad + wgrad layer by layer) when the
//             generator marked them one group and the stage is not split; else backward_input
//   W(mb, c)  backward_weight (nothing when fused into its B); frees the slot
//   SEND_F / SEND_B   start sending the stage's output / its input gradient to the rank of the
//             next / previous stage (tag: micro-batch and stage boundary)
//   RECV_F / RECV_B   receive into the slot's input / gradient; receives are posted ahead of
//             their place in the list as soon as their slot exists, so transfers overlap compute
//
// Invariants: a slot is reused only after its micro-batch's W and after every send from it has
// completed; the stages' slot counts cover schedule::inflight_slots (checked at construction);
// a receive is waited for only by the action that consumes it.
#pragma once

#include <functional>
#include <vector>

#include "comm/communicator.h"
#include "model/stage_model.h"
#include "schedule/action.h"
#include "schedule/simulator.h"

namespace trillion::parallel {

// Fills tokens and targets ([N] each) of micro-batch `micro` of the current step.
using MicroBatchSource = std::function<void(int64_t micro, int32_t* tokens, int32_t* targets)>;
// Document masking: fills `starts` ([B_local, T_whole], StageModel::set_documents) of micro-batch
// `micro`; every stage of the micro-batch gets them (attention runs on every stage).
using DocumentSource = std::function<void(int64_t micro, std::vector<int32_t>& starts)>;

class PipelineExecutor {
 public:
  // stages[c] runs chunk c of `rank`; pp is the pipeline group (rank r of it = pipeline rank r;
  // nullptr when every stage is on this rank). The schedule must outlive the executor.
  PipelineExecutor(const schedule::Schedule& schedule, int rank, std::vector<StageModel*> stages,
                   Backend& backend, MemoryTracker& tracker, comm::Communicator* pp = nullptr);

  // Runs the rank's actions for one step. grad_scale = dL/dloss per position (1 / global tokens
  // of the step). Returns, per micro-batch, the sum of its per-position losses (0 for the
  // micro-batches whose head is on another rank).
  std::vector<double> run(const MicroBatchSource& batches, double grad_scale,
                          const DocumentSource& documents = {});

  // The compute actions of the last run, in execution order, with start and end in seconds on
  // the machine's steady clock (comparable across the processes of one machine).
  const std::vector<schedule::TimedAction>& timeline() const { return timeline_; }
  // The most activation slots of chunk c in use at once during the last run.
  int peak_slots(int chunk) const { return peak_slots_.at(chunk); }
  // Seconds the last run waited for receives (communication not hidden behind compute).
  double wait_seconds() const { return wait_seconds_; }
  // Bytes the last run sent over the pp group (activations and their gradients), as the
  // group's own counters measured them.
  uint64_t sent_bytes() const { return sent_bytes_; }

 private:
  struct PendingSend {
    Buffer staging;  // a copy of what is sent, so the slot can be reused at once
    comm::Handle handle;
  };
  int take_slot(int chunk);
  void release_slot(int chunk, int slot);
  void start_send(const schedule::Action& a, const Tensor& data, int dest, int tag);
  // Posts receives of the list, in order, from next_recv_ on while their slots exist.
  void post_receives();
  void post_receive(size_t index);
  void wait_receive(size_t index);
  int peer(const schedule::Action& a, int delta) const;
  int tag(int microbatch, int boundary, bool gradient) const;
  void poll();

  const schedule::Schedule& schedule_;
  int rank_;
  Backend& be_;
  MemoryTracker& tracker_;
  comm::Communicator* pp_;
  std::vector<StageModel*> stages_;
  std::vector<schedule::Action> list_;
  std::vector<size_t> recv_positions_;  // indices of RECV actions in list_
  std::vector<int> recv_of_;            // per action index: its receive's position, or -1
  // Per run:
  std::vector<std::vector<int>> free_;     // [chunk]: free slots
  std::vector<std::vector<int>> slot_of_;  // [chunk][mb]: slot in use, or -1
  std::vector<int> in_use_, peak_slots_;
  std::vector<comm::Handle> recv_handles_;  // per receive position
  std::vector<char> recv_posted_;
  size_t next_recv_ = 0;
  std::vector<PendingSend> sends_;
  std::vector<schedule::TimedAction> timeline_;
  double wait_seconds_ = 0;
  uint64_t sent_bytes_ = 0;
};

}  // namespace trillion::parallel
