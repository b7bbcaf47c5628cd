// The training and validation datasets a run config names: "random" (uniform tokens, for
// benchmarks), "markov" (an in-memory order-K chain with a known entropy rate) or "shards"
// (files written by `trillion data prepare|synth`). Checks that every token fits the model, and
// finds the document-end token packed sequences are masked by (docs/data.md).
#pragma once

#include <memory>

#include "data/dataset.h"
#include "train/run_config.h"

namespace trillion {

struct RunDatasets {
  std::shared_ptr<data::TokenDataset> train, validation;
  // The token that ends a document (data.document_end_id, else the shards' metadata
  // "document_end_id", else their tokenizer's <|eos|>); -1: none (markov and random data: every
  // sequence is one piece of one document).
  int32_t document_end_id = -1;
};

RunDatasets open_run_datasets(const RunConfig& config);

}  // namespace trillion
