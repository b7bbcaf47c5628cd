// DataShard: the samples one rank reads. A step's global batch is grad_accum micro-batches of
// train.micro_batch sequences at consecutive global sample indices; the rank at position d of the
// data-parallel group reads the d-th B_local = micro_batch / dp of each micro-batch. The shard is
// keyed by the dp coordinate, never the world rank, so ranks of other groups (tensor, pipeline,
// context) that share a dp coordinate read the same samples, and the global order never depends
// on the layout (a resumed or re-laid-out run reads exactly the same tokens). Under context
// parallelism a rank keeps, of each of those sequences, the rows of its cp coordinate
// (model/sequence_split.h): [B_local, T/cp] tokens and their targets. Packed documents
// (docs/data.md): targets at a document-end token are data::kNoTarget under
// data.mask_boundary_loss, and the document starts of the whole sequences come separately.
// A resumed run goes on at the checkpoint's next sample (resume_at), not at step x the new
// global batch: a resume that changes train.micro_batch or train.grad_accum reads the very next
// samples of the stream, skipping and repeating none.
#pragma once

#include <cstdint>

#include "data/loader.h"
#include "data/mixture.h"
#include "model/sequence_split.h"
#include "train/datasets.h"

namespace trillion {

class DataShard {
 public:
  DataShard(const RunConfig& config, const RunDatasets& datasets, int dp_rank, int dp_size,
            SequenceSplit split = {}, int cp_rank = 0);

  int64_t local_batch() const { return local_batch_; }
  // This rank's part of micro-batch `micro` of step `step` ([B_local, T/cp] each).
  void train_batch(int64_t step, int64_t micro, int32_t* tokens, int32_t* targets) const;
  // This rank's part of validation micro-batch `i`.
  void validation_batch(int64_t i, int32_t* tokens, int32_t* targets) const;
  // Document masking: the document starts of the same micro-batches' whole sequences
  // ([B_local, T], global positions; data::document_starts), whatever this rank's cp rows.
  void train_documents(int64_t step, int64_t micro, std::vector<int32_t>& starts) const;
  void validation_documents(int64_t i, std::vector<int32_t>& starts) const;
  // Global index of the first training sample after `step` steps (what a checkpoint records as
  // its next sample): base + (step - base_step) x the global batch.
  uint64_t first_sample(int64_t step) const;
  // The run continues after step `step` at global sample `next_sample` (a checkpoint's).
  void resume_at(int64_t step, uint64_t next_sample);
  int64_t global_batch() const { return micro_batch_ * grad_accum_; }
  // The training stream's sources (data.sources; one without): samples of source s read in the
  // first `steps` steps, and the first source the step `step` would start a second epoch of.
  const data::MixtureLoader& train_stream() const { return train_; }
  uint64_t source_samples(int64_t steps, int s) const {
    return train_.samples_before(first_sample(steps), s);
  }
  std::optional<int> exhausted_at(int64_t step) const {
    return train_.exhausted_in(first_sample(step), global_batch());
  }

 private:
  data::MixtureLoader train_, validation_;
  int64_t micro_batch_, grad_accum_, local_batch_;
  int dp_rank_;
  int64_t base_step_ = 0;
  uint64_t base_sample_ = 0;
  std::vector<int64_t> positions_;  // this cp rank's positions of a sequence (all T: cp = 1)
  int64_t seq_len_;
  int32_t document_end_;     // -1: none
  bool mask_boundary_loss_;  // data.mask_boundary_loss
  uint64_t train_index(int64_t step, int64_t micro) const;
  uint64_t validation_index(int64_t i) const;
  // Reads B_local whole sequences from `first` (targets masked as configured) and keeps this cp
  // rank's rows of them.
  void read(const data::MixtureLoader& loader, uint64_t first, int32_t* tokens,
            int32_t* targets) const;
  void starts_of(const data::MixtureLoader& loader, uint64_t first,
                 std::vector<int32_t>& starts) const;
  // Keeps this cp rank's rows of [B_local, T] tokens and targets read into the scratch.
  void keep_own_rows(const int32_t* tokens_in, const int32_t* targets_in, int32_t* tokens,
                     int32_t* targets) const;
  mutable std::vector<int32_t> full_tokens_, full_targets_;
};

}  // namespace trillion
