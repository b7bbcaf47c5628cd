// See transformer.h.
#include "model/transformer.h"

#include "plan/parameter_table.h"

namespace trillion {

namespace {
ModelConfig validated(ModelConfig c) {
  c.validate();
  return c;
}
}  // namespace

TensorTable build_parameter_table(const ModelConfig& c) {
  return plan::parameter_table(c.spec(), c.dtype);
}

Transformer::Transformer(const ModelConfig& config, const BatchShape& batch, Backend& backend,
                         MemoryTracker& tracker, bool split_backward, ModelStorage storage,
                         bool restart_positions)
    : config_(validated(config)),
      batch_(batch),
      be_(backend),
      ctx_(ParallelContext::single(config_, batch.batch, batch.seq_len)),
      params_(build_parameter_table(config_), {}, config_.dtype, backend, tracker, storage) {
  const int last = plan::head_unit(config_.spec());
  stage_ = std::make_unique<StageModel>(config_, ctx_, params_, StageRange{0, last},
                                        StageOptions{1, split_backward, restart_positions}, backend,
                                        tracker);
}

double Transformer::forward(const int32_t* tokens, const int32_t* targets) {
  stage_->set_tokens(0, tokens);
  stage_->set_targets(0, targets);
  return stage_->forward(0) / static_cast<double>(batch_.batch * batch_.seq_len);
}

Tensor Transformer::head_weight() const {
  return params_.param(config_.tied_embeddings ? "embed" : "lm_head");
}

}  // namespace trillion
