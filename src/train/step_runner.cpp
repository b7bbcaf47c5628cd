// See step_runner.h.
#include "train/step_runner.h"

#include "core/timer.h"

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
}  // namespace

StepRunner::StepRunner(const RunConfig& config, Backend& backend, MemoryTracker& tracker)
    : config_(config), be_(backend),
      model_(config.model, {config.train.micro_batch, config.model.seq_len}, backend, tracker),
      optimizer_(model_.table(), config.model.dtype, adamw_config(config.optim), backend, tracker),
      schedule_(lr_schedule(config)) {
  const int64_t n = config.train.micro_batch * config.model.seq_len;
  tokens_.resize(n);
  targets_.resize(n);
}

int64_t StepRunner::tokens_per_step() const {
  return config_.train.micro_batch * config_.model.seq_len * config_.train.grad_accum;
}

StepStats StepRunner::step(int64_t step_index, const BatchSource& batches) {
  Timer timer;
  StepStats st;
  const int64_t accum = config_.train.grad_accum;
  const double grad_scale = 1.0 / static_cast<double>(tokens_per_step());
  model_.zero_grad();
  for (int64_t micro = 0; micro < accum; ++micro) {
    batches(step_index, micro, tokens_.data(), targets_.data());
    st.loss += model_.forward(tokens_.data(), targets_.data()) / static_cast<double>(accum);
    model_.backward(grad_scale);
  }
  st.grad_norm = clip_grad_norm(be_, model_.gradients(), config_.optim.grad_clip);
  st.lr = schedule_.at(step_index);
  optimizer_.step(model_.parameters(), model_.gradients(), st.lr);
  st.tokens = tokens_per_step();
  st.seconds = timer.seconds();
  return st;
}

}  // namespace trillion
