// The training and validation datasets a run config names: "random" (uniform tokens, for
// benchmarks), "markov" (an in-memory order-K chain with a known entropy rate) or "shards"
// (files written by `trillion data prepare|synth`). Checks that every token fits the model.
#pragma once

#include <memory>

#include "data/dataset.h"
#include "train/run_config.h"

namespace trillion {

struct RunDatasets {
  std::shared_ptr<data::TokenDataset> train, validation;
};

RunDatasets open_run_datasets(const RunConfig& config);

}  // namespace trillion
