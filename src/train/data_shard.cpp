// See data_shard.h.
#include "train/data_shard.h"

namespace trillion {

DataShard::DataShard(const RunConfig& c, const RunDatasets& d, int dp_rank, int dp_size)
    : train_(d.train, static_cast<int>(c.model.seq_len), c.train.seed),
      validation_(d.validation, static_cast<int>(c.model.seq_len), c.train.seed,
                  data::SampleOrder::kSequential),
      micro_batch_(c.train.micro_batch),
      grad_accum_(c.train.grad_accum),
      local_batch_(c.train.micro_batch / dp_size),
      dp_rank_(dp_rank) {}

uint64_t DataShard::first_sample(int64_t step) const {
  return static_cast<uint64_t>(step * grad_accum_ * micro_batch_);
}

void DataShard::train_batch(int64_t step, int64_t micro, int32_t* tokens, int32_t* targets) const {
  const uint64_t first = first_sample(step) + static_cast<uint64_t>(micro * micro_batch_ +
                                                                    dp_rank_ * local_batch_);
  train_.batch(first, static_cast<int>(local_batch_), tokens, targets);
}

void DataShard::validation_batch(int64_t i, int32_t* tokens, int32_t* targets) const {
  validation_.batch(static_cast<uint64_t>(i * micro_batch_ + dp_rank_ * local_batch_),
                    static_cast<int>(local_batch_), tokens, targets);
}

}  // namespace trillion
