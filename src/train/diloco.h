// DiLoCo (Douillard et al. 2311.08105) and Streaming DiLoCo (2501.18512) in the trainer.
//
// Islands: the run's parallel.dp data-parallel replicas form diloco.islands = K equal groups of
// consecutive dp coordinates (island = dp_rank / (dp / K)). Inside an island the step runner does
// ordinary synchronous data parallelism (ZeRO, pipelines) over the island's dp group; the global
// micro-batch is split over all replicas as without DiLoCo (each rank reads the same samples), so
// the islands together read exactly what synchronous DP reads. Between islands only the outer
// exchange travels, over the `across` group: the ranks that hold the same shard in every island.
//
// A round, per fragment f of the parameters (F = 1: the whole model; Streaming: groups of layers,
// optim/streaming_schedule.h), over the elements this rank's optimizer updates (its ZeRO shard):
//   after step t = send_step(f, k):  delta = theta_global - theta_local      (the pseudo-gradient)
//                                     start averaging delta over the islands (non-blocking; in
//                                     fp32 an all-reduce, in bf16 / fp4 an all-gather of the
//                                     quantised values summed in fp32 in island order)
//   inner steps t+1 .. t+tau run while the exchange travels (polled at every unit boundary)
//   after step t + tau:              theta_global <- outer Nesterov step on the islands' mean
//                                     theta_local  <- a theta_local + (1 - a) theta_global
// theta_global (the outer model) and the outer momentum are fp32 per owned element (8 bytes per
// parameter of optimizer memory). The inner optimizer's state stays with each island.
//
// Invariants: every island computes the same theta_global from the same averaged delta (the
// average is bitwise identical on every island); with H = 1, outer lr 1, momentum 0 and a linear
// inner optimizer (optim.name = "sgd") the run is synchronous data parallelism; a checkpoint
// (diloco.json, diloco.bin: outer model, momentum, averaged deltas awaiting their merge, and the
// parameters and moments of islands 1..K-1; island 0's are the checkpoint's params.bin and
// optimizer.bin) resumes bitwise, also while an exchange is in flight (it lands before the
// checkpoint is written; its merge stays at step t + tau).
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/device_mesh.h"
#include "model/unit_hooks.h"
#include "optim/outer_nesterov.h"
#include "optim/outer_quantize.h"
#include "optim/streaming_schedule.h"
#include "train/checkpoint/resume.h"
#include "train/step_runner.h"

namespace trillion {

// The process groups of the islands. Without [diloco]: one island, the mesh's own dp group.
class Islands {
 public:
  // Collective over the world.
  Islands(comm::DeviceMesh& mesh, const RunConfig& config);
  bool enabled() const { return across_ != nullptr; }
  int count() const { return count_; }
  int index() const { return index_; }
  // This island's data-parallel group.
  comm::Communicator& dp() { return island_dp_ ? *island_dp_ : mesh_dp_; }
  // This island's gradient-reduction group under context parallelism (its dp x cp ranks, in the
  // mesh's dp_cp order); the mesh's own dp_cp group without islands.
  comm::Communicator& dp_cp() { return island_dp_cp_ ? *island_dp_cp_ : mesh_dp_cp_; }
  // The rank holding this rank's shard in every island (rank i = island i). Only when enabled.
  comm::Communicator& across() { return *across_; }
  // Whether this rank's across group holds world rank 0 (the checkpoint writer).
  bool with_lead() const { return with_lead_; }
  // The config the island's step runner runs: dp / K replicas, micro_batch / K sequences.
  const RunConfig& runner_config() const { return runner_config_; }

 private:
  comm::Communicator &mesh_dp_, &mesh_dp_cp_;
  std::unique_ptr<comm::Communicator> island_dp_, island_dp_cp_, across_;
  int count_ = 1, index_ = 0;
  bool with_lead_ = true;
  RunConfig runner_config_;
};

// What one step's outer work did.
struct DilocoStep {
  std::vector<int> sent, merged;  // fragments whose exchange started / landed after the step
  comm::CommCounters across;      // bytes between islands started in the step
  double seconds = 0;             // time in after_step (added to the step's)
  double wait_seconds = 0;        // of which blocked on exchanges landing
  nlohmann::json json() const;
};

class Diloco : public UnitHooks, public CheckpointPart {
 public:
  using EventLog = std::function<void(const std::string&)>;
  // The runner runs islands.runner_config(); it must outlive this.
  Diloco(const RunConfig& config, StepRunner& runner, Islands& islands, MemoryTracker& tracker,
         EventLog event);
  ~Diloco() override;

  // A fresh run: the outer model is the initialised parameters, momentum zero.
  void start();
  // The outer work scheduled after `step` steps; makes `st` the whole step's (global tokens, the
  // outer work's time and bytes between islands).
  DilocoStep after_step(int64_t step, StepStats& st);
  // `evaluate_island` (a mean over this island's ranks) of the outer model, averaged over the
  // islands: the global model's loss on the whole validation batch. Collective over the world.
  double evaluate_global(const std::function<double()>& evaluate_island);

  std::string describe() const;
  nlohmann::json summary() const;
  // Bytes one exchange of fragment f sends from this rank (what the counters show).
  uint64_t exchange_bytes(int fragment) const;

  void save(std::vector<CheckpointFile>& files) override;
  void load(const std::string& checkpoint_dir) override;
  // Exchanges in flight make progress between the inner steps' passes.
  void before(int unit, Pass pass, Use use, int next) override;

 private:
  // Elements of one fragment: `length` at `param` in the optimizer's parameter buffer and at
  // `state` in the state layout (theta_global, momentum).
  struct Run {
    int64_t param = 0, state = 0, length = 0;
  };
  struct Fragment {
    std::vector<Run> runs;
    int64_t elements = 0;
  };
  struct Exchange {
    int fragment = 0;
    int64_t send_step = 0, merge_step = 0;
    Buffer delta;           // [elements] f32: this island's pseudo-gradient, then the mean
    Buffer wire, gathered;  // bf16 / fp4: this island's encoded delta, and every island's
    comm::Handle handle;    // null once landed
    bool done = false;      // handle tested complete
  };

  float* local_params() const;
  float* state(const Buffer& b) const { return static_cast<float*>(b.raw()); }
  int64_t wire_words(int fragment) const;  // fp4: f32 words one island's encoding fills
  void start_exchange(int fragment, int64_t step);
  void land(Exchange& x);   // waits and leaves the islands' mean in x.delta
  void apply(Exchange& x);  // outer step and merge of a landed exchange
  void refresh();           // ZeRO-1/2: every island rank gets the updated parameters
  void copy_pieces(bool to_local, const Buffer& state_buffer);

  RunConfig config_;
  StepRunner& runner_;
  Islands& islands_;
  MemoryTracker& tracker_;
  EventLog event_;
  FragmentSchedule schedule_;
  OuterPrecision precision_;
  std::vector<Fragment> fragments_;
  int64_t state_elements_ = 0;
  Buffer theta_global_, momentum_;  // [state_elements] f32, optimizer memory
  OuterNesterov outer_;
  std::vector<std::unique_ptr<Exchange>> pending_;
  int64_t exchanges_ = 0;
  uint64_t bytes_between_islands_ = 0;
  double wait_seconds_ = 0;
};

}  // namespace trillion
