// The training and validation datasets a run config names: "random" (uniform tokens, for
// benchmarks), "markov" (an in-memory order-K chain with a known entropy rate) or "shards"
// (files written by `trillion data prepare|synth`). Checks that every token fits the model, and
// finds the document-end token packed sequences are masked by (docs/data.md).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "train/run_config.h"

namespace trillion {

struct RunDatasets {
  std::shared_ptr<data::TokenDataset> train, validation;
  // The token that ends a document (data.document_end_id, else the shards' metadata
  // "document_end_id", else their tokenizer's <|eos|>); -1: none (markov and random data: every
  // sequence is one piece of one document).
  int32_t document_end_id = -1;
  // The sources blended into the training and validation streams (data/mixture.h) and their
  // weights; one source of weight 1 (train, validation) without data.sources.
  std::vector<std::shared_ptr<const data::TokenDataset>> train_sources, validation_sources;
  std::vector<double> weights;
  std::vector<std::string> source_names;
};

RunDatasets open_run_datasets(const RunConfig& config);

}  // namespace trillion
