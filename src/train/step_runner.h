// StepRunner: one optimizer step of a run = the rank's pipeline schedule over its stage models
// (grad_accum micro-batches; the stages of its pipeline rank, parallel.chunks of them per rank;
// with pp = 1 and one chunk the one-stage schedule), gradient reduction across the data-parallel
// group (parallel/data.h: buckets started during backward, ZeRO stage 0-3), the sum of the two
// copies' gradients under DualPipe, global-norm clipping over every stage, a learning rate from
// the schedule, and an AdamW or LAMB update of this rank's parameters. The trainer, `trillion
// bench step` and the tests all step through this one class, so what is benchmarked is what
// trains.
//
// train.micro_batch is the global micro-batch: this rank runs micro_batch / dp sequences of it.
// With one process (no groups given) the step is exactly the one-process algorithm. Under tensor
// parallelism (groups.tp) every layer runs its tp shard (model/block.h), the norm weights'
// gradients are summed over tp once per step (parallel/tensor.h) and the norm counts each
// parameter once across tp, pp and dp. Under context parallelism (groups.cp) every rank holds
// T/cp rows of each sequence (parallel.cp_split), attention runs as ring attention over cp
// (parallel/context.h) and gradients reduce over dp x cp (groups.dp_cp): each rank scales by the
// global token count, so the sum is the mean's gradient.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "model/linear_gemm.h"
#include "model/stage_model.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "optim/noise_scale.h"
#include "parallel/context.h"
#include "parallel/data.h"
#include "parallel/expert_comm.h"
#include "parallel/pipeline/executor.h"
#include "parallel/pipeline/tied_embedding.h"
#include "parallel/tensor.h"
#include "parallel/whole_tensors.h"
#include "schedule/action.h"
#include "train/run_config.h"

namespace trillion {

struct RankStages;  // train/step_layout.h

struct StepStats {
  double loss = 0;              // mean over the step's global batch
  bool update_skipped = false;  // the gate refused the update: parameters and moments unchanged
  double lr = 0;
  double grad_norm = 0;  // before clipping, over all shards
  int64_t tokens = 0;    // global
  double seconds = 0;
  uint64_t comm_bytes = 0;         // bytes this rank sent in the step, all groups
  comm::CommCounters comm;         // the dp group's counters for the step, per collective kind
  comm::CommCounters comm_pp;      // the pp group's: activations, their gradients, loss and norm
  comm::CommCounters comm_mirror;  // DualPipe: summing the two model copies' gradients
  comm::CommCounters comm_ep;      // expert parallelism: the all-to-alls and the experts' norm
  comm::CommCounters comm_edp;     // expert gradients over the ranks holding the same experts
  comm::CommCounters comm_tp;      // tensor parallelism: the layers' all-reduces (SP: gathers
                                   // and reduce-scatters), the loss's shard sums, norm grads
  comm::CommCounters comm_cp;      // context parallelism: ring attention's K/V and dK/dV
  // Expert parallelism: this rank's routed rows (parallel/expert_comm.h RowCounts).
  int64_t moe_rows_out = 0, moe_rows_in = 0, moe_rows_local = 0, moe_exchanges = 0;
  double comm_wait_seconds = 0;      // time blocked on gradient reductions after backward
  double pipeline_wait_seconds = 0;  // time blocked on pipeline receives
  // MoE layers, over the step's global batch (zero for dense models):
  double moe_max_load_ratio = 0;             // max over layers of (max / mean expert load)
  // [layer] max / mean (0 for dense layers); MoE MTP blocks follow as layers L + k.
  std::vector<double> moe_layer_load_ratio;
  int64_t moe_dropped_tokens = 0;            // assignments over capacity
  double moe_balance_loss = 0;               // mean over sequences of the layers' balance losses
  double moe_bias_norm = 0;                  // L2 norm of every routing bias after its update
  // Multi-token prediction: [k - 1] = depth k's loss, summed over positions over the step's
  // global tokens (DeepSeek-V3's L_MTP^k; ignored positions count 0), and the weight lambda.
  std::vector<double> mtp_losses;
  double mtp_loss_weight = 0;
  // The gradient noise scale's measurements (optim/noise_scale.h, batches in tokens): each dp
  // rank's gradient (under ZeRO-2/3 each micro-batch's) as the small-batch estimates, the step's
  // as the big one. Valid with two or more estimates, without DualPipe's two model copies and
  // without expert parallelism (its expert gradients are not in the dense small-batch norms).
  NoiseScaleSample noise;
  bool noise_valid = false;
};

// Whether the step's update is applied, from its (all-reduced, so on every rank the same) loss
// and gradient norm (train/guard.h). Without a gate, a non-finite loss or norm skips it.
using UpdateGate = std::function<bool(double loss, double grad_norm)>;

// This rank's process groups (nullptr: a group of one), from the DeviceMesh.
struct RankGroups {
  comm::Communicator* dp = nullptr;
  comm::Communicator* pp = nullptr;
  comm::Communicator* ep = nullptr;     // expert parallelism (within dp)
  comm::Communicator* edp = nullptr;    // the ranks holding the same experts
  comm::Communicator* tp = nullptr;     // tensor parallelism (within a pp stage and dp replica)
  comm::Communicator* cp = nullptr;     // context parallelism (ring attention)
  comm::Communicator* dp_cp = nullptr;  // gradient reduction when cp > 1 (dp x cp)
};

// Fills tokens and targets ([B_local*T] each) for this rank's part of micro-batch `micro` of
// step `step`.
using BatchSource =
    std::function<void(int64_t step, int64_t micro, int32_t* tokens, int32_t* targets)>;

// Document masking (data.document_mask): fills the document starts ([B_local, T], the whole
// sequence; StageModel::set_documents) of this rank's part of micro-batch `micro` of `step`.
using DocumentBatchSource =
    std::function<void(int64_t step, int64_t micro, std::vector<int32_t>& starts)>;

class StepRunner {
 public:
  // Groups of sizes config.parallel.dp and .pp. Throws Error naming the values for a layout this
  // build cannot run, before allocating.
  StepRunner(const RunConfig& config, Backend& backend, MemoryTracker& tracker,
             RankGroups groups = {});
  // dp only (pp = 1).
  StepRunner(const RunConfig& config, Backend& backend, MemoryTracker& tracker,
             comm::Communicator* dp)
      : StepRunner(config, backend, tracker, RankGroups{dp, nullptr}) {}

  StepStats step(int64_t step_index, const BatchSource& batches, const UpdateGate& gate = {});
  // Document masking: every later step's micro-batches attend within the documents `source`
  // gives (empty: causal attention over whole sequences).
  void set_document_source(DocumentBatchSource source) { documents_ = std::move(source); }
  // Sum of one micro-batch's per-position losses over its token count, forward only
  // (validation); starts: its document starts under document masking. Collective over pp.
  double evaluate(const int32_t* tokens, const int32_t* targets,
                  const std::vector<int32_t>* starts = nullptr);
  // Initial parameters, identical for every layout.
  void init_parameters(uint64_t seed);

  // The one-process layout of the parameters or of an optimizer moment, for checkpoints: every
  // rank gets the whole model (collective over the dp and pp groups), and loads it back cut to
  // its layout, so any layout resumes any checkpoint. Buffers hold global_elements().
  int64_t global_elements() const { return global_table_.total_elements(); }
  const TensorTable& global_table() const { return global_table_; }
  void gather_global_parameters(const Buffer& global);
  void gather_global_state(const Buffer& state, const Buffer& global);
  void load_global_parameters(const Buffer& global);
  void load_global_state(const Buffer& global, const Buffer& state);

  // Sharded checkpoints: the runs of the global layout this rank writes (disjoint over the world,
  // together the whole model), read in place from its own buffers; and loading this rank's state
  // from any layout's checkpoint through `read(global offset, destination)`, which fills a
  // local-layout buffer one contiguous run at a time.
  struct OwnedRun {
    int64_t global = 0, length = 0;
    const Buffer* params = nullptr;
    int64_t param_offset = 0, state_offset = 0;  // in *params and in the optimizer's moments
    bool stateless = false;  // no optimizer moments (zeros in the checkpoint): a whole tensor
  };
  std::vector<OwnedRun> owned_runs();
  using GlobalReader = std::function<void(int64_t global, const Tensor& destination)>;
  void load_parameters_from(const GlobalReader& read);
  void load_state_from(const GlobalReader& read, const Buffer& state);

  ParameterSet& parameters() { return *params_; }
  const TensorTable& table() const { return params_->table(); }
  int num_stages() const { return static_cast<int>(stages_.size()); }  // on this rank
  StageModel& stage(int chunk) { return *stages_.at(chunk); }
  const schedule::Schedule& schedule() const { return schedule_; }
  int pipeline_rank() const { return pp_.rank(); }
  comm::Communicator& pipeline_group() { return pp_; }
  comm::Communicator& data_group() { return dp_; }
  comm::Communicator& expert_data_group() { return edp_; }  // ranks holding the same experts
  const parallel::PipelineExecutor& executor() const { return *executor_; }
  Optimizer& optimizer() { return *optimizer_; }
  parallel::DataParallel& data_parallel() { return *parallel_; }
  const LrSchedule& lr_schedule() const { return lr_schedule_; }
  int64_t tokens_per_step() const;
  // Whether the tp ranks hold different routed-expert parameters (parallel.expert_tp).
  bool experts_differ_over_tp() const;  // global
  int64_t local_micro_batch() const { return config_.train.micro_batch / dp_.size(); }
  const ParallelContext& context() const { return ctx_; }
  // Context parallelism's ring attention (nullptr with cp = 1): its counters.
  const parallel::RingAttention* ring_attention() const { return ring_.get(); }

 private:
  RunConfig config_;
  Backend& be_;
  std::unique_ptr<comm::Communicator> local_dp_, local_pp_;  // groups of one when none is given
  comm::Communicator& dp_;
  comm::Communicator& pp_;
  std::unique_ptr<comm::Communicator> local_ep_, local_edp_;
  comm::Communicator& ep_;
  comm::Communicator& edp_;
  std::unique_ptr<comm::Communicator> local_tp_;
  comm::Communicator& tp_;
  std::unique_ptr<comm::Communicator> local_cp_, local_dp_cp_;
  comm::Communicator& cp_;
  comm::Communicator& reduce_;  // where gradients and the loss reduce: dp, or dp x cp
  std::unique_ptr<parallel::TensorParallel> tensor_;     // tp > 1: replicated grads and the norm
  std::unique_ptr<parallel::AllToAllExchange> experts_;  // expert parallelism's all-to-all
  std::unique_ptr<comm::Communicator> mirror_;  // DualPipe: this rank and the one holding the
                                                // same stages of the other model copy
  ParallelContext ctx_;
  std::unique_ptr<LinearPrecision> precision_;  // a [precision] recipe other than fp32
  schedule::Schedule schedule_, eval_schedule_;
  TensorTable global_table_;
  MemoryTracker& tracker_;
  std::unique_ptr<parallel::RingAttention> ring_;  // cp > 1; the stages' contexts point at it
  std::unique_ptr<ParameterSet> params_;
  std::vector<std::unique_ptr<StageModel>> stages_;  // per chunk of this rank
  std::unique_ptr<parallel::DataParallel> parallel_;
  // Expert parallelism: the routed experts reduce over the edp group (parallel_ then holds the
  // dense tensors, over dp).
  std::unique_ptr<parallel::DataParallel> expert_parallel_;
  // ZeRO-3 with the aux-loss-free router: the routing biases, whole on every rank outside the
  // stores (parallel/whole_tensors.h); nullptr otherwise.
  std::unique_ptr<parallel::WholeTensors> whole_;
  std::unique_ptr<parallel::PipelineExecutor> executor_, eval_executor_;
  // Tied embeddings with the embedding and the head on different pipeline ranks: this rank's end
  // of the exchange (parallel/pipeline/tied_embedding.h); nullptr elsewhere.
  std::unique_ptr<parallel::TiedEmbedding> tied_;
  // Test hook TRILLION_CHECK_TIED_COPY=1: the pp group again, for TiedEmbedding::check_copy after
  // every step, uncounted by the step's communication.
  std::unique_ptr<comm::Communicator> tied_check_;
  // The constructor's parts, in the order it calls them.
  void attach_ring_attention();
  void attach_experts();
  void build_tied_embedding(const RankStages& stages);
  // Whether this rank's "embed" is the last stage's copy of the first stage's table.
  bool holds_tied_copy() const {
    return tied_ && tied_->end() == parallel::TiedEmbedding::End::last;
  }
  void attach_precision();
  void allocate_parameters(const RankStages& stages);
  void build_stage_models(const RankStages& stages);
  void build_data_parallel(const RankStages& stages);
  void connect_weight_source();
  void build_executors();
  void build_optimizer();
  SumAcrossRanks lamb_sums();
  // The step's parts, in the order step() calls them.
  struct CommSnapshot;
  struct NoiseEstimates;
  CommSnapshot comm_snapshot() const;
  double forward_backward(int64_t step_index, const BatchSource& batches);
  NoiseEstimates reduce_gradients(StepStats& st);
  void measure_grad_norm(StepStats& st, const NoiseEstimates& noise);
  void apply_update(const StepStats& st);
  // MoE: the step's expert loads over the data-parallel group, the aux-loss-free bias update and
  // the routing metrics.
  void finish_moe_step(StepStats& st);
  void finish_mtp_step(StepStats& st, int64_t step_index);
  void count_communication(StepStats& st, const CommSnapshot& before);
  // Assembles a local-layout buffer into the global layout over the pp group (one holder of
  // each tensor contributes).
  void to_global(const Buffer& local, const Buffer& global);
  // This rank's parameters into / from a local-table-layout buffer (every store, then the
  // tensors kept whole).
  void gather_local_parameters(const Buffer& local);
  void load_local_parameters(const Buffer& local);
  std::unique_ptr<Optimizer> optimizer_;
  LrSchedule lr_schedule_;
  DocumentBatchSource documents_;
};

}  // namespace trillion
