// See data_shard.h.
#include "train/data_shard.h"

#include "backend/backend.h"

static_assert(trillion::data::kNoTarget == trillion::kIgnoredTarget,
              "the loader's ignored target is the loss's");

namespace trillion {

DataShard::DataShard(const RunConfig& c, const RunDatasets& d, int dp_rank, int dp_size,
                     SequenceSplit split, int cp_rank)
    : train_(d.train_sources, d.weights, static_cast<int>(c.model.seq_len), c.train.seed),
      validation_(d.validation_sources, d.weights, static_cast<int>(c.model.seq_len), c.train.seed,
                  data::SampleOrder::kSequential),
      micro_batch_(c.train.micro_batch),
      grad_accum_(c.train.grad_accum),
      local_batch_(c.train.micro_batch / dp_size),
      dp_rank_(dp_rank),
      positions_(split.positions(c.model.seq_len, cp_rank)),
      seq_len_(c.model.seq_len),
      document_end_(d.document_end_id),
      mask_boundary_loss_(c.data.mask_boundary_loss && d.document_end_id >= 0),
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

uint64_t DataShard::train_index(int64_t step, int64_t micro) const {
  return first_sample(step) + static_cast<uint64_t>(micro * micro_batch_ + dp_rank_ * local_batch_);
}

uint64_t DataShard::validation_index(int64_t i) const {
  return static_cast<uint64_t>(i * micro_batch_ + dp_rank_ * local_batch_);
}

void DataShard::read(const data::MixtureLoader& loader, uint64_t first, int32_t* tokens,
                     int32_t* targets) const {
  const bool whole = static_cast<int64_t>(positions_.size()) == seq_len_;
  int32_t* tok = whole ? tokens : full_tokens_.data();
  int32_t* tgt = whole ? targets : full_targets_.data();
  loader.batch(first, static_cast<int>(local_batch_), tok, tgt);
  if (mask_boundary_loss_) {
    data::mask_boundary_targets(tok, local_batch_ * seq_len_, document_end_, tgt);
  }
  if (!whole) keep_own_rows(tok, tgt, tokens, targets);
}

void DataShard::starts_of(const data::MixtureLoader& loader, uint64_t first,
                          std::vector<int32_t>& starts) const {
  const int64_t n = local_batch_ * seq_len_;
  std::vector<int32_t> tokens(n), targets(n);
  loader.batch(first, static_cast<int>(local_batch_), tokens.data(), targets.data());
  starts.resize(n);
  for (int64_t b = 0; b < local_batch_; ++b) {
    data::document_starts(tokens.data() + b * seq_len_, seq_len_, document_end_,
                          starts.data() + b * seq_len_);
  }
}

void DataShard::train_batch(int64_t step, int64_t micro, int32_t* tokens, int32_t* targets) const {
  read(train_, train_index(step, micro), tokens, targets);
}

void DataShard::validation_batch(int64_t i, int32_t* tokens, int32_t* targets) const {
  read(validation_, validation_index(i), tokens, targets);
}

void DataShard::train_documents(int64_t step, int64_t micro, std::vector<int32_t>& starts) const {
  starts_of(train_, train_index(step, micro), starts);
}

void DataShard::validation_documents(int64_t i, std::vector<int32_t>& starts) const {
  starts_of(validation_, validation_index(i), starts);
}

}  // namespace trillion
