// The layout search: enumerate TP (divisors of the heads within the NVLink domain), CP, PP (every
// depth that divides L, L + 1 or L + 2, so uneven splits such as 126 layers on 16 stages or a
// published PP35 are considered), schedules with their chunks (interleaved v from 2 up to the
// units per rank: layers, plus the embedding and head a balanced split may give a stage of their
// own), the stage partition (even or balanced), EP, DP, ZeRO stage, recompute, micro-batch and
// precision for a model on N GPUs of one kind; refuse layouts that cannot run or do not fit,
// saying why; rank the rest by step time (the batch is fixed, so time per token).
//
// Invariants: fields the caller fixes are never varied; no ranked layout is impossible (degrees
// divide, every stage holds a whole layer (or the embedding or head alone), chunks <= units per
// rank, the schedule accepts the micro-batch count, memory fits, the schedule played is at most
// kMaxScheduleSize stage x micro-batch pairs); every refused layout is
// counted under one reason, and the closest layout that did not fit is kept with its
// per-category bytes; for each shape and recompute policy only the lowest ZeRO stage that fits is
// timed (more sharding only adds communication); schedule simulations are cached in step_model.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "plan/layout.h"
#include "plan/step_model.h"

namespace trillion::plan {

// The largest pipeline schedule the search simulates, in (stage, micro-batch) pairs: pp x
// chunks x the micro-batches it is played with (memory.h: steady_state_microbatches). 2^17
// admits 128 ranks with 2 chunks or 64 with 8; larger schedules are refused, with a reason.
constexpr int64_t kMaxScheduleSize = int64_t{1} << 17;

struct SearchOptions {
  Layout fixed;         // values of the fields marked in `fields`
  LayoutFields fields;  // which fields are fixed
  std::vector<Precision> precisions = {Precision::kBf16};
  int keep = 10;  // ranked candidates to return
  Efficiency efficiency;
  // When set (planning an engine run config: cli/plan_run_config.h), why the engine cannot train
  // a layout, or "" when it can; a layout it names is refused with that reason, so the planner
  // never proposes a run the engine refuses.
  std::function<std::string(const Layout&)> engine_refusal;
};

struct Candidate {
  Layout layout;
  StepBreakdown step;
};

// Why layouts were refused: one entry per reason, with a count and one example.
struct Refusal {
  std::string reason;
  long count = 0;
  std::string example;  // a layout and the numbers that refused it
};

struct SearchResult {
  std::vector<Candidate> ranked;  // fastest first
  long shapes = 0;                // layouts considered (every refused one included)
  long fitting = 0;               // of which fit in memory and were timed
  long simulations = 0;           // schedule simulations run
  std::vector<Refusal> refusals;
  // The layout that came closest to fitting (smallest need / HBM) and its memory, if any failed
  // on memory.
  bool has_near_miss = false;
  Layout near_miss;
  MemoryBreakdown near_miss_memory;
};

// Throws trillion::Error when no layout can run or fits; the message names what refused them
// and, for memory, the closest layout's bytes needed per category against the HBM.
SearchResult search_layouts(const ModelSpec& m, const Gpu& gpu, long gpus, int64_t seq_len,
                            double batch_tokens, const SearchOptions& options);

// "weights 6.3, gradients 12.7, ..., total 93.1 GB on pipeline rank 0 of 80 GB (13.1 GB over)".
std::string explain_memory(const MemoryBreakdown& m, double hbm_bytes);

// Pipeline depths the search considers for L layers: every p <= min(L, max) dividing L, L + 1
// or L + 2.
std::vector<int> pipeline_depths(int64_t n_layers, int max_depth);

}  // namespace trillion::plan
