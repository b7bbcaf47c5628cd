// See step_runner.h.
#include "train/step_runner.h"

#include <fmt/format.h>

#include "core/timer.h"
#include "model/transformer.h"
#include "optim/lamb.h"
#include "plan/stage_partition.h"
#include "schedule/generators.h"
#include "schedule/simulator.h"

namespace trillion {

namespace {
AdamWConfig adamw_config(const OptimConfig& o) {
  return {o.beta1, o.beta2, o.eps, o.weight_decay};
}

LrSchedule lr_schedule_of(const RunConfig& c) {
  LrSchedule s;
  s.kind = parse_lr_schedule(c.optim.schedule);
  s.peak_lr = c.optim.lr;
  s.min_lr = c.optim.min_lr;
  s.warmup_steps = c.optim.warmup_steps;
  s.total_steps = std::max<int64_t>(1, c.train.steps);
  s.decay_fraction = c.optim.decay_fraction;
  return s;
}

comm::Communicator& checked_group(comm::Communicator& dp, const RunConfig& c) {
  if (dp.size() != c.parallel.dp) {
    throw Error(
        fmt::format("parallel.dp = {} but the data-parallel group has {} process(es); "
                    "start {} processes (trillion launch -n {} -- train ...)",
                    c.parallel.dp, dp.size(), c.parallel.dp, c.parallel.dp));
  }
  return dp;
}

// The layouts this build trains; the others are shown by `trillion inspect`.
const RunConfig& checked_layout(const RunConfig& c) {
  auto refuse = [](const char* key, int64_t v, const char* what) {
    if (v != 1) {
      throw Error(fmt::format("parallel.{} = {}: {} is not in this build yet; `trillion inspect "
                              "CONFIG --set parallel.{}={}` shows the layout's shards and local "
                              "shapes",
                              key, v, what, key, v));
    }
  };
  refuse("tp", c.parallel.tp, "tensor parallelism");
  refuse("pp", c.parallel.pp, "pipeline parallelism across processes");
  refuse("cp", c.parallel.cp, "context parallelism");
  refuse("ep", c.parallel.ep, "expert parallelism");
  return c;
}

ParallelContext context_of(const RunConfig& c, int dp) {
  return {local_shape(c.model, c.train.micro_batch / dp, c.model.seq_len), {}, {}};
}

schedule::Schedule schedule_of(const RunConfig& c) {
  const schedule::ScheduleKind kind = schedule::parse_schedule_kind(c.parallel.schedule);
  const bool chunked = kind == schedule::ScheduleKind::kInterleaved;
  if (!chunked && c.parallel.chunks != 1) {
    throw Error(fmt::format("parallel.chunks = {} needs parallel.schedule = \"interleaved\" "
                            "(the {} schedule runs one chunk per rank)",
                            c.parallel.chunks, c.parallel.schedule));
  }
  return schedule::generate_schedule(kind, static_cast<int>(c.parallel.pp),
                                     static_cast<int>(c.train.grad_accum),
                                     static_cast<int>(c.parallel.chunks));
}

parallel::DataParallelOptions parallel_options(const RunConfig& c) {
  const double elem = static_cast<double>(dtype_size(c.model.dtype));
  return {static_cast<int>(c.parallel.zero),
          static_cast<int64_t>(c.parallel.bucket_mb * 1e6 / elem), c.parallel.overlap,
          c.train.grad_accum};
}
}  // namespace

StepRunner::StepRunner(const RunConfig& config, Backend& backend, MemoryTracker& tracker,
                       comm::Communicator* dp)
    : config_(checked_layout(config)),
      be_(backend),
      local_(dp == nullptr ? std::make_unique<comm::LocalCommunicator>("dp") : nullptr),
      dp_(checked_group(dp == nullptr ? *local_ : *dp, config)),
      ctx_(context_of(config, dp_.size())),
      schedule_(schedule_of(config)),
      lr_schedule_(lr_schedule_of(config)) {
  const ModelConfig& mc = config.model;
  const int zero = static_cast<int>(config.parallel.zero);
  params_ = std::make_unique<ParameterSet>(build_parameter_table(mc), ShardCoord{}, mc.dtype,
                                           backend, tracker,
                                           parallel::DataParallel::model_storage(zero));
  // Stage s of the model runs where the schedule's path places it; this rank is rank 0 of a
  // one-rank pipeline, so its chunks are all the stages.
  const int n_stages = schedule_.num_stages(0);
  const std::vector<plan::StageUnits> partition = plan::partition_stages(mc.n_layers, n_stages);
  const std::vector<int> slots = schedule::inflight_slots(schedule_, 0);
  stages_.resize(schedule_.num_chunks);
  for (int s = 0; s < n_stages; ++s) {
    const schedule::Placement& where = schedule_.path(0)[s];
    stages_[where.chunk] = std::make_unique<StageModel>(
        mc, ctx_, *params_, StageRange{partition[s].first_unit, partition[s].last_unit},
        StageOptions{slots[where.chunk], config.parallel.split_backward}, backend, tracker);
  }
  parallel_ = std::make_unique<parallel::DataParallel>(*params_, dp_, backend, tracker,
                                                       parallel_options(config));
  std::vector<StageModel*> chunks;
  for (auto& s : stages_) chunks.push_back(s.get());
  executor_ = std::make_unique<parallel::PipelineExecutor>(schedule_, 0, chunks, backend);

  const AdamWConfig oc = adamw_config(config.optim);
  if (config.optim.name == "lamb") {
    optimizer_ = std::make_unique<Lamb>(params_->table(), parallel_->segments(),
                                        parallel_->state_elements(), mc.dtype, oc, tracker,
                                        parallel_->sum_across_ranks());
  } else {
    optimizer_ = std::make_unique<AdamW>(params_->table(), parallel_->segments(),
                                         parallel_->state_elements(), mc.dtype, oc, backend,
                                         tracker);
  }
}

int64_t StepRunner::tokens_per_step() const {
  return config_.train.micro_batch * config_.model.seq_len * config_.train.grad_accum;
}

StepStats StepRunner::step(int64_t step_index, const BatchSource& batches) {
  Timer timer;
  StepStats st;
  const comm::CommCounters before = dp_.counters();
  const int64_t accum = config_.train.grad_accum;
  // Every rank scales by the global token count, so the sum over ranks is the mean's gradient.
  const double grad_scale = 1.0 / static_cast<double>(tokens_per_step());
  parallel_->begin_step();
  const std::vector<double> sums = executor_->run(
      [&](int64_t micro, int32_t* tokens, int32_t* targets) {
        batches(step_index, micro, tokens, targets);
      },
      grad_scale);
  const double N = static_cast<double>(ctx_.shape.tokens());
  for (double sum : sums) st.loss += sum / N / static_cast<double>(accum);
  parallel_->finish_gradients();
  st.loss = parallel_->mean_across_ranks(st.loss);
  st.grad_norm = parallel_->clip_gradients(config_.optim.grad_clip);
  st.lr = lr_schedule_.at(step_index);
  optimizer_->step(parallel_->optimizer_params(), parallel_->optimizer_grads(), st.lr);
  parallel_->finish_step();
  st.tokens = tokens_per_step();
  st.seconds = timer.seconds();
  st.comm = dp_.counters() - before;
  st.comm_bytes = st.comm.total_sent();
  st.comm_wait_seconds = parallel_->exposed_wait_seconds();
  return st;
}

double StepRunner::evaluate(const int32_t* tokens, const int32_t* targets) {
  // Stage order along the schedule's path; activations handed over in memory (one rank).
  double sum = 0;
  const int n_stages = schedule_.num_stages(0);
  for (int s = 0; s < n_stages; ++s) {
    StageModel& stage = *stages_[schedule_.path(0)[s].chunk];
    if (stage.has_embedding()) stage.set_tokens(0, tokens);
    if (stage.has_head()) stage.set_targets(0, targets);
    if (s > 0) be_.copy(stage.input(0), stages_[schedule_.path(0)[s - 1].chunk]->output(0));
    sum += stage.forward(0);
  }
  return sum / static_cast<double>(ctx_.shape.tokens());
}

}  // namespace trillion
