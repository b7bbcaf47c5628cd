// The layout search: enumerate TP, CP, PP (+ schedule and chunks), EP, DP, ZeRO stage,
// recompute, micro-batch and precision for a model on N GPUs of one kind; drop layouts that do
// not fit in HBM; rank the rest by step time (the batch is fixed, so this is time per token).
//
// Invariants: fields the caller fixes are never varied; for each shape only the cheapest
// recompute policy and ZeRO stage that fit are timed (more recompute or sharding is never
// faster in the model), which keeps a 2T-model search on 16K GPUs to seconds; schedule
// simulations are cached by (kind, p, m, v, cost ratios) in step_model.
#pragma once

#include <vector>

#include "plan/layout.h"
#include "plan/step_model.h"

namespace trillion::plan {

struct SearchOptions {
  Layout fixed;         // values of the fields marked in `fields`
  LayoutFields fields;  // which fields are fixed
  std::vector<Precision> precisions = {Precision::kBf16};
  int keep = 10;  // ranked candidates to return
  Efficiency efficiency;
};

struct Candidate {
  Layout layout;
  StepBreakdown step;
};

struct SearchResult {
  std::vector<Candidate> ranked;  // fastest first
  long shapes = 0;                // layouts considered
  long fitting = 0;               // of which fit in memory and were timed
  long simulations = 0;           // schedule simulations run
};

// Throws trillion::Error when no layout fits, naming what to change.
SearchResult search_layouts(const ModelSpec& m, const Gpu& gpu, long gpus, int64_t seq_len,
                            double batch_tokens, const SearchOptions& options);

}  // namespace trillion::plan
