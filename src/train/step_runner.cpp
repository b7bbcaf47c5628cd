// See step_runner.h. The constructor and step() call their named parts in order; what the
// layout resolves to before anything is allocated is step_layout.h's.
#include "train/step_runner.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>

#include "core/timer.h"
#include "model/router.h"
#include "model/transformer.h"
#include "optim/lamb.h"
#include "optim/sgd.h"
#include "plan/context_ring.h"
#include "plan/parameter_table.h"
#include "schedule/simulator.h"
#include "train/step_layout.h"

namespace trillion {

namespace {

comm::Communicator& group_or(comm::Communicator* g, std::unique_ptr<comm::Communicator>& local,
                             const char* name) {
  if (g != nullptr) return *g;
  local = std::make_unique<comm::LocalCommunicator>(name);
  return *local;
}

// A tied head or MTP modules (which look tokens up in the embedding) on a pipeline whose ends are
// on different ranks: which end this rank holds (none without either, with pp = 1, under
// DualPipe — its ranks hold both ends — and on the middle ranks).
enum class TiedEnd { none, first, last };
TiedEnd tied_end(const ModelConfig& m, int pp, const RankStages& stages) {
  if (!(m.tied_embeddings || m.mtp.enabled()) || pp <= 1) return TiedEnd::none;
  const bool embedding = stages.holds(plan::embedding_unit());
  const bool head = stages.holds(static_cast<int>(m.n_layers) + 1);
  if (embedding == head) return TiedEnd::none;
  return embedding ? TiedEnd::first : TiedEnd::last;
}

// Whether a tied embedding's copy is exchanged chunk by chunk where the optimizer updates it
// (tied_embedding.h): ZeRO-2/3 keep its gradient in dp shards, and a precision recipe's store
// keeps its weights as an fp32 master beside the bf16 copy the model reads.
bool tied_in_chunks(const RunConfig& c) {
  return c.parallel.zero >= 2 || recipe_weights_in_store(c);
}

// This rank's coordinate among the tp shards and the ep ranks (which experts it holds).
ShardCoord shard_coord(const comm::Communicator& tp, const comm::Communicator& ep,
                       const RunConfig& c) {
  return ShardCoord{tp.size(), tp.rank(), ep.size(), ep.rank(), experts_split_over_tp(c)};
}

}  // namespace

// The comm counters of every group as a step starts; the step reports the differences.
struct StepRunner::CommSnapshot {
  comm::CommCounters dp, pp, mirror, ep, edp, tp, cp, reduce;
};

// The gradient noise scale's small-batch estimates of a step (optim/noise_scale.h): how many,
// and the sum of their squared norms over this rank's part of the model.
struct StepRunner::NoiseEstimates {
  bool valid = false;
  int64_t count = 0;
  double sum_squares = 0;
};

StepRunner::StepRunner(const RunConfig& config, Backend& backend, MemoryTracker& tracker,
                       RankGroups groups)
    : config_(checked_layout(config)),
      be_(backend),
      dp_(checked_group(group_or(groups.dp, local_dp_, "dp"), config.parallel.dp, "dp")),
      pp_(checked_group(group_or(groups.pp, local_pp_, "pp"), config.parallel.pp, "pp")),
      // With the experts over tp x ep the ep group spans the tp ranks too (comm/device_mesh.h).
      ep_(checked_group(group_or(groups.ep, local_ep_, "ep"),
                        config.parallel.ep * (experts_over_tp(config) ? config.parallel.tp : 1),
                        "ep")),
      edp_(group_or(groups.edp, local_edp_, "edp")),
      tp_(checked_group(group_or(groups.tp, local_tp_, "tp"), config.parallel.tp, "tp")),
      cp_(checked_group(group_or(groups.cp, local_cp_, "cp"), config.parallel.cp, "cp")),
      reduce_(config.parallel.cp > 1
                  ? checked_group(group_or(groups.dp_cp, local_dp_cp_, "dp_cp"),
                                  config.parallel.dp * config.parallel.cp, "dp_cp")
                  : dp_),
      ctx_(context_of(config, dp_.size(), tp_, cp_)),
      schedule_(schedule_of(config)),
      eval_schedule_(forward_only(schedule_)),
      global_table_(build_parameter_table(config.model)),
      tracker_(tracker),
      lr_schedule_(lr_schedule_of(config)) {
  // Each part needs the ones before it: the layer modules' attachments in ctx_, then the
  // parameters of the stages this pipeline rank holds, their models, their gradient reduction,
  // the executors that run the schedule over them, and the optimizer of what this rank owns.
  const RankStages stages =
      rank_stages(schedule_, config_.model.n_layers, config_.parallel.stage_layers(), pp_.rank());
  attach_ring_attention();
  attach_experts();
  attach_precision();
  allocate_parameters(stages);
  build_stage_models(stages);
  build_data_parallel(stages);
  connect_weight_source();
  build_tied_embedding(stages);
  build_executors();
  build_optimizer();
}

// Context parallelism: every stage's attention runs as ring attention over cp.
void StepRunner::attach_ring_attention() {
  if (cp_.size() <= 1) return;
  const ModelConfig& mc = config_.model;
  const ParallelConfig& pc = config_.parallel;
  // MLA: the latent ring where parallel.cp_mla asks for it (auto: where it sends fewer bytes).
  const bool latent = plan::context_ring_latent(mc.spec(), {pc.tp, pc.sp, pc.cp},
                                                plan::parse_cp_mla(pc.cp_mla, "parallel.cp_mla"));
  ring_ = std::make_unique<parallel::RingAttention>(
      be_, tracker_, cp_, ctx_.sequence, ctx_.shape.attention(), mc.seq_len, mc.dtype,
      AttentionBlocks{mc.attention_block, mc.attention_block},
      latent ? mc.mla_dims.kv_lora_rank + mc.mla_dims.qk_rope_head_dim : 0);
  ctx_.context_attention = ring_.get();
}

// Expert parallelism: this rank holds experts [ep_rank E/ep, (ep_rank + 1) E/ep).
void StepRunner::attach_experts() {
  if (ep_.size() <= 1) return;
  experts_ = std::make_unique<parallel::AllToAllExchange>(ep_, be_, tracker_,
                                                          config_.model.moe.n_routed_experts);
  ctx_.experts = experts_.get();
  ctx_.ep = &ep_;
  ctx_.degrees.ep = ep_.size();
  ctx_.shard = shard_coord(tp_, ep_, config_);
}

// The linear layers' precision recipe (fp32: none, the backend's GEMMs exactly).
void StepRunner::attach_precision() {
  const PrecisionConfig& p = config_.precision;
  if (p.recipe == "fp32") return;
  const int64_t n_layers = config_.model.n_layers;
  const precision::Recipe recipe = precision::recipe_with(p.recipe, p.wgrad_hadamard);
  precision_ = std::make_unique<LinearPrecision>(
      recipe, config_.train.seed, precision::resolve_bf16_blocks(recipe, n_layers, p.bf16_blocks),
      n_layers, p.head == "bf16");
  ctx_.precision = precision_.get();
}

// In table order, so DualPipe's two ranks holding the same stages lay them out identically.
// A recipe's weights: fp32 master and bf16 copy in the ZeRO store (mixed_weights.h), or, where
// recipe_weights_in_store says no, the fp32 master in the model's buffer and the bf16 copy of
// the linear layers in LinearPrecision.
void StepRunner::allocate_parameters(const RankStages& stages) {
  const bool in_store = recipe_weights_in_store(config_);
  const bool bf16_grads = config_.precision.grad_dtype == "bf16";
  ModelStorage storage = parallel::DataParallel::model_storage(
      static_cast<int>(config_.parallel.zero), in_store, bf16_grads);
  storage.master_weights = precision_ != nullptr && !in_store;
  const ShardCoord coord = shard_coord(tp_, ep_, config_);
  // The head's rank of a tied model holds a copy of the embedding table (tied_embedding.h).
  const bool copy = tied_end(config_.model, pp_.size(), stages) == TiedEnd::last;
  auto holds = [&](int unit) {
    return stages.holds(unit) || (copy && unit == plan::embedding_unit());
  };
  params_ = std::make_unique<ParameterSet>(global_table_.local(holds, coord), coord,
      config_.model.dtype, be_, tracker_, storage);
  if (precision_ && !in_store) precision_->attach_weights(params_->parameters(), tracker_);
}

// One StageModel per chunk, with the activation slots the schedule keeps in flight.
void StepRunner::build_stage_models(const RankStages& stages) {
  const int rank = pp_.rank();
  const std::vector<int> slots = schedule::inflight_slots(schedule_, rank);
  std::vector<char> split(schedule_.num_chunks, config_.parallel.split_backward ? 1 : 0);
  for (const schedule::Action& a : schedule_.actions[rank]) {
    if (a.kind == schedule::ActionKind::kBackwardInput &&
        a.group != schedule::ActionGroup::kFusedWithNextW) {
      split[a.chunk] = 1;  // the schedule defers this W: keep what it needs
    }
  }
  stages_.resize(schedule_.num_chunks);
  for (int c = 0; c < schedule_.num_chunks; ++c) {
    const plan::StageUnits& u = stages.of_chunk(c);
    stages_[c] = std::make_unique<StageModel>(
        config_.model, ctx_, *params_, StageRange{u.first_unit, u.last_unit},
        StageOptions{slots[c], split[c] != 0, config_.data.restart_positions}, be_, tracker_);
  }
}

// Gradient reduction over dp (x cp: reduce_); under expert parallelism the routed experts reduce
// over edp instead, in a DataParallel of their own (as under ZeRO-3 with routing biases, which
// stay outside both).
void StepRunner::build_data_parallel(const RankStages& stages) {
  const int rank = pp_.rank();
  parallel::DataParallelOptions dp_options = parallel_options(config_);
  dp_options.mixed_precision = recipe_weights_in_store(config_);
  dp_options.bf16_gradients = config_.precision.grad_dtype == "bf16";
  // Backward passes per unit per step: the micro-batches its chunk runs (DualPipe's two copies
  // see half each).
  std::vector<int64_t> passes_of_chunk(schedule_.num_chunks, 0);
  for (const schedule::Action& a : schedule_.actions[rank]) {
    if (a.kind == schedule::ActionKind::kBackwardWeight) ++passes_of_chunk[a.chunk];
  }
  dp_options.passes_per_unit.assign(params_->num_units(), 0);
  for (int c = 0; c < schedule_.num_chunks; ++c) {
    const plan::StageUnits& u = stages.of_chunk(c);
    for (int g = u.first_unit; g <= u.last_unit; ++g) {
      dp_options.passes_per_unit[params_->local_unit(g)] = passes_of_chunk[c];
    }
  }
  // ZeRO-2/3 with a tied embedding across the pipeline: the table gets a bucket of its own on both
  // ends, and the head's copy is completed by the head's passes (tied_embedding.h).
  const TiedEnd tied = tied_end(config_.model, pp_.size(), stages);
  if (tied != TiedEnd::none && tied_in_chunks(config_)) {
    dp_options.tied_unit = params_->local_unit(plan::embedding_unit());
    dp_options.tied_copy = tied == TiedEnd::last;
    if (dp_options.tied_copy) {
      const int head = params_->local_unit(static_cast<int>(config_.model.n_layers) + 1);
      dp_options.passes_per_unit[dp_options.tied_unit] = dp_options.passes_per_unit[head];
    }
  }
  // ZeRO-3 keeps the routing biases whole, outside both stores (parallel/whole_tensors.h).
  if (config_.parallel.zero == 3) {
    whole_ =
        std::make_unique<parallel::WholeTensors>(*params_, plan::is_routing_bias, be_, tracker_);
    if (whole_->empty()) whole_.reset();
  }
  if (ep_.size() <= 1 && !whole_) {
    parallel_ =
        std::make_unique<parallel::DataParallel>(*params_, reduce_, be_, tracker_, dp_options);
    return;
  }
  // Each unit's routed experts reduce over edp (dp x cp with ep = 1), the rest over dp (x cp:
  // reduce_) but for the tensors kept whole; one bucket per unit, since a unit's parts
  // interleave in the flat layout.
  const parallel::UnitParts parts = parallel::unit_parts(*params_, whole_.get());
  const std::vector<UnitRange>&dense = parts.dense, &expert = parts.expert;
  comm::Communicator& experts = ep_.size() > 1 ? edp_ : reduce_;
  parallel::DataParallelOptions expert_options = dp_options;
  dp_options.ranges = dense;
  dp_options.bucket_elements = 0;
  // ZeRO-2/3: the expert shards follow the dense ones in the dense instance's buffers.
  if (config_.parallel.zero >= 2) {
    dp_options.shard_extra =
        parallel::BucketPlan(expert, 0, experts.size(), experts.rank()).shard_elements();
  }
  parallel_ =
      std::make_unique<parallel::DataParallel>(*params_, reduce_, be_, tracker_, dp_options);
  expert_options.ranges = expert;
  expert_options.bucket_elements = 0;
  expert_options.state_base = parallel_->state_elements();
  if (config_.parallel.zero >= 2) expert_options.shard_host = parallel_.get();
  expert_parallel_ =
      std::make_unique<parallel::DataParallel>(*params_, experts, be_, tracker_, expert_options);
}

// A recipe's GEMMs read the bf16 weights the store widened (instead of rounding them again).
void StepRunner::connect_weight_source() {
  if (!precision_ || !recipe_weights_in_store(config_)) return;
  precision_->set_weight_source([this](const float* fp32, int64_t count) -> const bf16* {
    const bf16* dense = parallel_->bf16_weights(fp32, count);
    if (dense != nullptr || !expert_parallel_) return dense;
    return expert_parallel_->bf16_weights(fp32, count);
  });
}

// Tied embeddings across pipeline ranks: the first and the last stage exchange the head's
// gradient of the table and the updated table (parallel/pipeline/tied_embedding.h). Registered
// after DataParallel, so its hook sees a completed gradient before the reduction starts.
void StepRunner::build_tied_embedding(const RankStages& stages) {
  const TiedEnd end = tied_end(config_.model, pp_.size(), stages);
  const ModelConfig& m = config_.model;
  if (std::getenv("TRILLION_CHECK_TIED_COPY") != nullptr && pp_.size() > 1 &&
      schedule_.kind != schedule::ScheduleKind::kDualPipe &&
      (m.tied_embeddings || m.mtp.enabled())) {
    tied_check_ = pp_.split(0, pp_.rank(), "tied_check");  // collective over pp
  }
  if (end == TiedEnd::none) return;
  const int global_unit = end == TiedEnd::first ? plan::embedding_unit()
                                                : static_cast<int>(config_.model.n_layers) + 1;
  const int unit = params_->local_unit(global_unit);
  int64_t passes = 0;
  for (int c = 0; c < schedule_.num_chunks; ++c) {
    const plan::StageUnits& u = stages.of_chunk(c);
    if (global_unit < u.first_unit || global_unit > u.last_unit) continue;
    for (const schedule::Action& a : schedule_.actions[pp_.rank()]) {
      if (a.chunk == c && a.kind == schedule::ActionKind::kBackwardWeight) ++passes;
    }
  }
  tied_ = std::make_unique<parallel::TiedEmbedding>(
      end == TiedEnd::first ? parallel::TiedEmbedding::End::first
                            : parallel::TiedEmbedding::End::last,
      *params_, pp_, end == TiedEnd::first ? pp_.size() - 1 : 0, unit, passes, be_, tracker_,
      tied_in_chunks(config_) ? parallel_.get() : nullptr);
}

// The step's schedule and the validation pass over this rank's chunks; DualPipe's mirror group
// pairs this rank with the one holding the same stages of the other model copy.
void StepRunner::build_executors() {
  const int rank = pp_.rank();
  std::vector<StageModel*> chunks;
  for (auto& s : stages_) chunks.push_back(s.get());
  comm::Communicator* pp = pp_.size() > 1 ? &pp_ : nullptr;
  executor_ =
      std::make_unique<parallel::PipelineExecutor>(schedule_, rank, chunks, be_, tracker_, pp);
  eval_executor_ =
      std::make_unique<parallel::PipelineExecutor>(eval_schedule_, rank, chunks, be_, tracker_, pp);
  if (schedule_.kind == schedule::ScheduleKind::kDualPipe) {
    const int p = pp_.size();
    mirror_ = pp_.split(std::min(rank, p - 1 - rank), rank, "pp_mirror");
  }
}

// The optimizer over the segments this rank updates (dense, then experts); under tp the
// replicated tensors' gradients are reduced by tensor_, built over the dense segments.
void StepRunner::build_optimizer() {
  const ModelConfig& mc = config_.model;
  const AdamWConfig oc = adamw_config(config_.optim);
  std::vector<OptimSegment> segments = parallel_->segments();
  if (tp_.size() > 1) {
    tensor_ = std::make_unique<parallel::TensorParallel>(
        tp_, ctx_.sequence_parallel(), params_->table(), segments, be_, experts_differ_over_tp());
  }
  int64_t state = parallel_->state_elements();
  if (expert_parallel_) {
    const auto& more = expert_parallel_->segments();
    segments.insert(segments.end(), more.begin(), more.end());
    state += expert_parallel_->state_elements();
  }
  if (config_.optim.name == "sgd") {
    optimizer_ =
        std::make_unique<Sgd>(params_->table(), segments, state, mc.dtype,
                              SgdConfig{config_.optim.beta1, config_.optim.weight_decay}, tracker_);
  } else if (config_.optim.name == "lamb") {
    optimizer_ = std::make_unique<Lamb>(params_->table(), segments, state, mc.dtype, oc, tracker_,
                                        lamb_sums());
  } else {
    optimizer_ =
        std::make_unique<AdamW>(params_->table(), segments, state, mc.dtype, oc, be_, tracker_);
  }
}

// LAMB's per-tensor partial sums, added over the ranks that hold parts of each tensor.
SumAcrossRanks StepRunner::lamb_sums() {
  SumAcrossRanks sums = parallel_->sum_across_ranks();
  if (expert_parallel_) {
    // Dense tensors' sums add over dp, experts' over edp.
    const int n_specs = params_->table().size();
    std::vector<char> is_expert(n_specs);
    for (int i = 0; i < n_specs; ++i) {
      is_expert[i] = params_->table().spec(i).role == TensorRole::routed_expert;
    }
    sums = [this, is_expert, n_specs, dense = parallel_->sum_across_ranks(),
            experts = expert_parallel_->sum_across_ranks()](std::vector<double>& v) {
      std::vector<double> d = v, e = v;
      for (size_t i = 0; i < v.size(); ++i) (is_expert[i % n_specs] ? d : e)[i] = 0;
      dense(d);
      experts(e);
      for (size_t i = 0; i < v.size(); ++i) v[i] = d[i] + e[i];
    };
  }
  if (tensor_) {
    // A tp shard's partial sums add over tp; a replicated tensor's are the same on every tp rank
    // (taken from tp rank 0).
    const int n_specs = params_->table().size();
    std::vector<char> sharded(n_specs);
    for (int i = 0; i < n_specs; ++i) {
      const ShardGroup g = params_->table().spec(i).shard.group;
      sharded[i] = g == ShardGroup::tp || (g == ShardGroup::ep && experts_differ_over_tp());
    }
    sums = [this, sharded, n_specs, inner = sums](std::vector<double>& v) {
      inner(v);
      for (size_t i = 0; i < v.size(); ++i) {
        if (!sharded[i % n_specs] && tp_.rank() != 0) v[i] = 0;
      }
      tp_.all_reduce(Tensor(v.data(), DType::f64, {static_cast<int64_t>(v.size())}));
    };
  }
  return sums;
}

bool StepRunner::experts_differ_over_tp() const {
  return experts_over_tp(config_) || experts_split_over_tp(config_);
}

int64_t StepRunner::tokens_per_step() const {
  return config_.train.micro_batch * config_.model.seq_len * config_.train.grad_accum;
}

StepStats StepRunner::step(int64_t step_index, const BatchSource& batches, const UpdateGate& gate) {
  Timer timer;
  StepStats st;
  const CommSnapshot before = comm_snapshot();
  st.loss = forward_backward(step_index, batches);
  const NoiseEstimates noise = reduce_gradients(st);
  measure_grad_norm(st, noise);
  st.lr = lr_schedule_.at(step_index);
  st.update_skipped = gate ? !gate(st.loss, st.grad_norm)
                           : !(std::isfinite(st.loss) && std::isfinite(st.grad_norm));
  if (!st.update_skipped) apply_update(st);
  // The head's copy := the updated table: its chunk before ZeRO-2/3 gathers or keeps the shards,
  // the whole table after ZeRO-0/1 made it whole again.
  if (tied_ && tied_->sharded()) tied_->copy_weights();
  // A skipped step still closes the step (ZeRO gathers the unchanged shards, gradients clear).
  parallel_->finish_step();
  if (expert_parallel_) expert_parallel_->finish_step();
  if (tied_ && !tied_->sharded()) tied_->copy_weights();
  if (tied_ && tied_check_) {
    const std::string differs = tied_->check_copy(
        *tied_check_, tied_->end() == parallel::TiedEmbedding::End::first ? pp_.size() - 1 : 0);
    if (!differs.empty()) throw Error(fmt::format("step {}: {}", step_index, differs));
  }
  if (config_.model.moe.enabled()) finish_moe_step(st);
  if (config_.model.mtp.enabled()) finish_mtp_step(st, step_index);
  st.tokens = tokens_per_step();
  st.seconds = timer.seconds();
  count_communication(st, before);
  return st;
}

StepRunner::CommSnapshot StepRunner::comm_snapshot() const {
  return {dp_.counters(), pp_.counters(),    mirror_ ? mirror_->counters() : comm::CommCounters{},
          ep_.counters(), edp_.counters(),   tp_.counters(),
          cp_.counters(), reduce_.counters()};
}

// The schedule's forward and backward passes over the step's micro-batches. Returns the mean
// loss over this rank's tokens, known to every pipeline rank.
double StepRunner::forward_backward(int64_t step_index, const BatchSource& batches) {
  const int64_t accum = config_.train.grad_accum;
  // Every rank scales by the global token count, so the sum over ranks is the mean's gradient.
  const double grad_scale = 1.0 / static_cast<double>(tokens_per_step());
  parallel_->begin_step();
  if (expert_parallel_) expert_parallel_->begin_step();
  if (precision_) precision_->begin_step(step_index);
  for (auto& stage : stages_) {  // evaluations since the last step left their MTP sums: drop them
    stage->take_mtp_losses();
    stage->set_mtp_loss_weight(config_.model.mtp.weight_at(step_index));
  }
  const std::vector<double> sums = executor_->run(
      [&](int64_t micro, int32_t* tokens, int32_t* targets) {
        batches(step_index, micro, tokens, targets);
      },
      grad_scale,
      documents_ ? parallel::DocumentSource([&](int64_t micro, std::vector<int32_t>& starts) {
        documents_(step_index, micro, starts);
      })
                 : parallel::DocumentSource{});
  const double N = static_cast<double>(ctx_.shape.tokens());
  double loss = 0;
  for (double sum : sums) loss += sum / N / static_cast<double>(accum);
  // The head stages hold the losses (both ends under DualPipe); every pipeline rank learns them.
  if (pp_.size() > 1) pp_.all_reduce(Tensor(&loss, DType::f64, {1}));
  return loss;
}

// Finishes the gradients' reduction over dp (x cp) and, under DualPipe, sums the two model
// copies'; st.loss becomes the step's global mean.
StepRunner::NoiseEstimates StepRunner::reduce_gradients(StepStats& st) {
  parallel_->finish_gradients();
  if (expert_parallel_) expert_parallel_->finish_gradients();
  if (tied_) tied_->finish_gradients();
  if (tensor_) tensor_->reduce_replicated_gradients(parallel_->optimizer_grads());
  // The noise scale's small-batch estimates (unreduced gradients) ride on the loss's all-reduce
  // over dp and the norm's over pp: no extra round trip.
  NoiseEstimates noise;
  noise.count = dp_.size() * parallel_->local_estimates();
  // A tied embedding's copy exchanged chunk-wise adds the head's part of the table's gradient
  // after the reductions, so no rank ever holds its unreduced sum (the same on every pp rank).
  const ModelConfig& mc = config_.model;
  const bool tied_chunks = pp_.size() > 1 && schedule_.kind != schedule::ScheduleKind::kDualPipe &&
                           (mc.tied_embeddings || mc.mtp.enabled()) && tied_in_chunks(config_);
  noise.valid =
      noise.count > 1 && !mirror_ && !expert_parallel_ && !tensor_ && !ring_ && !tied_chunks;
  const int64_t scalars = noise.valid ? 2 : 1;
  // Every rank's loss is the mean over its tokens, and every rank of dp x cp holds as many.
  double dp_sums[2] = {st.loss, noise.valid ? parallel_->local_sum_squares() : 0.0};
  if (reduce_.size() > 1) reduce_.all_reduce(Tensor(dp_sums, DType::f64, {scalars}));
  st.loss = dp_sums[0] / reduce_.size();
  noise.sum_squares = dp_sums[1];
  // DualPipe: the gradient of a stage is the sum over the two model copies that hold it.
  if (mirror_) {
    for (const Tensor& g : parallel_->reduced_gradients()) mirror_->all_reduce(g);
    if (expert_parallel_) {
      for (const Tensor& g : expert_parallel_->reduced_gradients()) mirror_->all_reduce(g);
    }
  }
  return noise;
}

// The global gradient norm over every stage, each parameter once (one of the two DualPipe
// copies), and the noise scale's measurement beside it.
void StepRunner::measure_grad_norm(StepStats& st, const NoiseEstimates& noise) {
  const int64_t scalars = noise.valid ? 2 : 1;
  double norm_sums[2] = {parallel_->gradient_sum_squares(), noise.sum_squares};
  if (tensor_) {
    std::vector<double> replicated{tensor_->replicated_sum_squares(parallel_->optimizer_grads())};
    parallel_->sum_across_ranks()(replicated);  // over the dp shards, as the total is
    norm_sums[0] = tensor_->global_sum_squares(norm_sums[0], replicated[0]);
  }
  if (expert_parallel_) {
    // Dense tensors are replicated over ep (its ranks are dp x cp ranks); experts differ per ep
    // rank.
    double experts = expert_parallel_->gradient_sum_squares();
    ep_.all_reduce(Tensor(&experts, DType::f64, {1}));
    // Experts split over tp along their width: the tp ranks hold different pieces too.
    if (ctx_.experts_tp) tp_.all_reduce(Tensor(&experts, DType::f64, {1}));
    norm_sums[0] += experts;
  }
  if (mirror_ && pp_.rank() >= pp_.size() / 2) norm_sums[0] = 0;
  if (pp_.size() > 1) pp_.all_reduce(Tensor(norm_sums, DType::f64, {scalars}));
  const double sum_sq = norm_sums[0];
  st.grad_norm = std::sqrt(sum_sq);
  if (noise.valid) {
    const double tokens = static_cast<double>(tokens_per_step()),
                 e = static_cast<double>(noise.count);
    // Estimate i of E is g_i * E (each rank scales by the step's token count): the mean of
    // |G_small|^2 is E * sum |g_i|^2.
    st.noise = {e * norm_sums[1], tokens / e, sum_sq, tokens};
    st.noise_valid = true;
  }
}

// Global-norm clipping, then the optimizer's update of this rank's parameters.
void StepRunner::apply_update(const StepStats& st) {
  if (config_.optim.grad_clip > 0 && st.grad_norm > config_.optim.grad_clip) {
    parallel_->scale_gradients(config_.optim.grad_clip / st.grad_norm);
    if (expert_parallel_) {
      expert_parallel_->scale_gradients(config_.optim.grad_clip / st.grad_norm);
    }
  }
  optimizer_->step(parallel_->optimizer_params(), parallel_->optimizer_grads(), st.lr);
}

// What each group sent during the step, and the time blocked on reductions and receives.
void StepRunner::count_communication(StepStats& st, const CommSnapshot& before) {
  st.comm = ring_ ? reduce_.counters() - before.reduce : dp_.counters() - before.dp;
  if (ring_) st.comm_cp = cp_.counters() - before.cp;
  st.comm_pp = pp_.counters() - before.pp;
  if (mirror_) st.comm_mirror = mirror_->counters() - before.mirror;
  st.comm_ep = ep_.counters() - before.ep;
  st.comm_edp = edp_.counters() - before.edp;
  st.comm_tp = tp_.counters() - before.tp;
  if (experts_) {
    const auto rows = experts_->take_row_counts();
    st.moe_rows_out = rows.out, st.moe_rows_in = rows.in, st.moe_rows_local = rows.local;
    st.moe_exchanges = rows.plans;
  }
  st.comm_bytes = st.comm.total_sent() + st.comm_pp.total_sent() + st.comm_mirror.total_sent() +
                  st.comm_ep.total_sent() + st.comm_edp.total_sent() + st.comm_tp.total_sent() +
                  st.comm_cp.total_sent();
  st.comm_wait_seconds = parallel_->exposed_wait_seconds();
  st.pipeline_wait_seconds = executor_->wait_seconds();
}

double StepRunner::evaluate(const int32_t* tokens, const int32_t* targets,
                            const std::vector<int32_t>* starts) {
  const int64_t n = ctx_.shape.tokens();
  if (precision_) precision_->refresh_weights();  // the master may have moved since the step
  const std::vector<double> sums = eval_executor_->run(
      [&](int64_t, int32_t* tok, int32_t* tgt) {
        std::copy(tokens, tokens + n, tok);
        std::copy(targets, targets + n, tgt);
      },
      1.0,
      starts != nullptr
          ? parallel::DocumentSource([&](int64_t, std::vector<int32_t>& out) { out = *starts; })
          : parallel::DocumentSource{});
  for (auto& stage : stages_) stage->release_expert_rows();  // no backward will free them
  double sum = sums[0];
  if (pp_.size() > 1) pp_.all_reduce(Tensor(&sum, DType::f64, {1}));
  return sum / static_cast<double>(n);
}

}  // namespace trillion
