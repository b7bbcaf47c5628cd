// See step_runner.h.
#include "train/step_runner.h"

#include <fmt/format.h>

#include "core/timer.h"
#include "optim/lamb.h"

namespace trillion {

namespace {
AdamWConfig adamw_config(const OptimConfig& o) {
  return {o.beta1, o.beta2, o.eps, o.weight_decay};
}

LrSchedule lr_schedule(const RunConfig& c) {
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

parallel::DataParallelOptions parallel_options(const RunConfig& c) {
  const double elem = static_cast<double>(dtype_size(c.model.dtype));
  return {static_cast<int>(c.parallel.zero),
          static_cast<int64_t>(c.parallel.bucket_mb * 1e6 / elem), c.parallel.overlap};
}
}  // namespace

StepRunner::StepRunner(const RunConfig& config, Backend& backend, MemoryTracker& tracker,
                       comm::Communicator* dp)
    : config_(config),
      be_(backend),
      local_(dp == nullptr ? std::make_unique<comm::LocalCommunicator>("dp") : nullptr),
      dp_(checked_group(dp == nullptr ? *local_ : *dp, config)),
      model_(config.model, {config.train.micro_batch / config.parallel.dp, config.model.seq_len},
             backend, tracker, false,
             parallel::DataParallel::model_storage(static_cast<int>(config.parallel.zero))),
      parallel_(model_, dp_, backend, tracker, parallel_options(config)),
      schedule_(lr_schedule(config)) {
  const AdamWConfig oc = adamw_config(config.optim);
  if (config.optim.name == "lamb") {
    optimizer_ =
        std::make_unique<Lamb>(model_.table(), parallel_.segments(), parallel_.state_elements(),
                               config.model.dtype, oc, tracker, parallel_.sum_across_ranks());
  } else {
    optimizer_ =
        std::make_unique<AdamW>(model_.table(), parallel_.segments(), parallel_.state_elements(),
                                config.model.dtype, oc, backend, tracker);
  }
  const int64_t n = local_micro_batch() * config.model.seq_len;
  tokens_.resize(n);
  targets_.resize(n);
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
  parallel_.begin_step();
  for (int64_t micro = 0; micro < accum; ++micro) {
    parallel_.set_last_micro(micro == accum - 1);
    batches(step_index, micro, tokens_.data(), targets_.data());
    st.loss += model_.forward(tokens_.data(), targets_.data()) / static_cast<double>(accum);
    model_.backward(grad_scale);
  }
  parallel_.finish_gradients();
  st.loss = parallel_.mean_across_ranks(st.loss);
  st.grad_norm = parallel_.clip_gradients(config_.optim.grad_clip);
  st.lr = schedule_.at(step_index);
  optimizer_->step(parallel_.optimizer_params(), parallel_.optimizer_grads(), st.lr);
  parallel_.finish_step();
  st.tokens = tokens_per_step();
  st.seconds = timer.seconds();
  st.comm = dp_.counters() - before;
  st.comm_bytes = st.comm.total_sent();
  st.comm_wait_seconds = parallel_.exposed_wait_seconds();
  return st;
}

}  // namespace trillion
