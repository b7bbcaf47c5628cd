// See data_shard.h.
#include "train/data_shard.h"

namespace trillion {

DataShard::DataShard(const RunConfig& c, const RunDatasets& d, int dp_rank, int dp_size,
                     SequenceSplit split, int cp_rank)
    : train_(d.train, static_cast<int>(c.model.seq_len), c.train.seed),
      validation_(d.validation, static_cast<int>(c.model.seq_len), c.train.seed,
                  data::SampleOrder::kSequential),
      micro_batch_(c.train.micro_batch),
      grad_accum_(c.train.grad_accum),
      local_batch_(c.train.micro_batch / dp_size),
      dp_rank_(dp_rank),
      positions_(split.positions(c.model.seq_len, cp_rank)),
      seq_len_(c.model.seq_len),
      full_tokens_(local_batch_ * c.model.seq_len),
      full_targets_(local_batch_ * c.model.seq_len) {}

void DataShard::keep_own_rows(const int32_t* tokens_in, const int32_t* targets_in, int32_t* tokens,
                              int32_t* targets) const {
  const int64_t Tl = static_cast<int64_t>(positions_.size());
  for (int64_t b = 0; b < local_batch_; ++b) {
    for (int64_t t = 0; t < Tl; ++t) {
      tokens[b * Tl + t] = tokens_in[b * seq_len_ + positions_[t]];
      targets[b * Tl + t] = targets_in[b * seq_len_ + positions_[t]];
    }
  }
}

uint64_t DataShard::first_sample(int64_t step) const {
  return base_sample_ + static_cast<uint64_t>((step - base_step_) * global_batch());
}

void DataShard::resume_at(int64_t step, uint64_t next_sample) {
  base_step_ = step;
  base_sample_ = next_sample;
}

void DataShard::train_batch(int64_t step, int64_t micro, int32_t* tokens, int32_t* targets) const {
  const uint64_t first =
      first_sample(step) + static_cast<uint64_t>(micro * micro_batch_ + dp_rank_ * local_batch_);
  if (static_cast<int64_t>(positions_.size()) == seq_len_) {
    train_.batch(first, static_cast<int>(local_batch_), tokens, targets);
    return;
  }
  train_.batch(first, static_cast<int>(local_batch_), full_tokens_.data(), full_targets_.data());
  keep_own_rows(full_tokens_.data(), full_targets_.data(), tokens, targets);
}

void DataShard::validation_batch(int64_t i, int32_t* tokens, int32_t* targets) const {
  const uint64_t first = static_cast<uint64_t>(i * micro_batch_ + dp_rank_ * local_batch_);
  if (static_cast<int64_t>(positions_.size()) == seq_len_) {
    validation_.batch(first, static_cast<int>(local_batch_), tokens, targets);
    return;
  }
  validation_.batch(first, static_cast<int>(local_batch_), full_tokens_.data(),
                    full_targets_.data());
  keep_own_rows(full_tokens_.data(), full_targets_.data(), tokens, targets);
}

}  // namespace trillion
