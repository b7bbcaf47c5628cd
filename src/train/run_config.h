// RunConfig: everything a run is configured by, parsed from a TOML file plus `--set
// section.key=value` overrides, validated before anything is allocated. Unknown sections and
// keys are errors (a typo must not silently fall back to a default). to_toml() writes the fully
// resolved config, which is what a run directory records and what --resume reads back.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace trillion {

struct TrainConfig {
  int64_t micro_batch = 8;       // B: sequences per micro-batch
  int64_t grad_accum = 1;        // micro-batches per optimizer step
  int64_t steps = 100;           // optimizer steps
  uint64_t seed = 1234;          // parameter init and data order
  int64_t log_every = 10;        // steps between progress lines
  int64_t eval_every = 0;        // steps between validation passes (0: only at the end)
  int64_t eval_batches = 8;      // micro-batches per validation pass
  int64_t checkpoint_every = 0;  // steps between checkpoints (0: only at the end)
  int64_t keep_checkpoints = 2;  // newest checkpoints kept on disk
};

struct OptimConfig {
  std::string name = "adamw";  // adamw | lamb
  double lr = 3e-4;
  double min_lr = 3e-5;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;           // global norm; 0 disables
  std::string schedule = "cosine";  // constant | cosine | wsd
  int64_t warmup_steps = 0;
  double decay_fraction = 0.2;  // wsd: fraction of steps in the final decay
};

struct DataConfig {
  std::string source = "random";  // random | markov | shards
  std::string path;               // shards: directory or file prefix written by `data prepare`
  int64_t order = 1;              // markov: context length K
  int64_t vocab = 0;              // markov/random: token range (0: model.vocab_size)
  uint64_t seed = 1;              // markov: chain seed
  int64_t tokens = 1 << 20;       // markov/random: training stream length
  int64_t val_tokens = 1 << 16;   // markov/random: validation stream length
  double sharpness = 2.0;         // markov: peakiness of transition rows (see data/markov.h)
};

// [parallel]: the layout. Data parallelism over `dp` processes (started by `trillion launch -n
// dp`), ZeRO stage 0-3 and the gradient bucket size; the pipeline schedule each rank runs
// (`schedule`, with `chunks` model chunks per rank; with pp = 1 the chunks are stages of one
// process) and whether backward passes are split into dgrad and wgrad. tp, pp, cp and ep are
// read so `trillion inspect` can show any layout; training with them > 1 comes with their
// parallelisms. train.micro_batch is the global micro-batch: each dp rank runs micro_batch / dp
// sequences of it, so any dp trains the same run (docs/multiprocess.md).
struct ParallelConfig {
  int64_t dp = 1;
  int64_t tp = 1, pp = 1, cp = 1, ep = 1;
  int64_t zero = 0;         // 0: all-reduce; 1: optimizer state; 2: + gradients; 3: + parameters
  double bucket_mb = 25.0;  // gradient bucket size in MB (1e6 bytes), stages 0-2
  bool overlap = true;      // false: wait for each bucket at once (to measure what overlap hides)
  std::string schedule = "1f1b";  // gpipe | 1f1b | interleaved | zb-h1 | zb-h2 | dualpipe
  int64_t chunks = 1;             // model chunks per rank (interleaved: >= 2)
  bool split_backward = false;    // run every backward as separate B (dgrad) and W (wgrad) passes
  int64_t world_size() const { return dp * tp * pp * cp; }
};

struct RunConfig {
  ModelConfig model;
  TrainConfig train;
  OptimConfig optim;
  DataConfig data;
  ParallelConfig parallel;
  std::string source;  // where it came from, for messages
};

// Parses `path`, applies `overrides` ("section.key=value"; the value is read as TOML, or as a
// string if it does not parse), validates. Throws Error naming the file, key and fix.
RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides);
// The same from TOML text (tests; `source` names it in messages).
RunConfig parse_run_config(const std::string& toml_text, const std::string& source,
                           const std::vector<std::string>& overrides);
// The fully resolved config as TOML.
std::string to_toml(const RunConfig& config);

}  // namespace trillion
