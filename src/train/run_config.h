// RunConfig: everything a run is configured by, parsed from a TOML file plus `--set
// section.key=value` overrides, validated before anything is allocated. Unknown sections and
// keys are errors (a typo must not silently fall back to a default). to_toml() writes the fully
// resolved config, which is what a run directory records and what --resume reads back.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "optim/streaming_schedule.h"

namespace trillion {

struct TrainConfig {
  int64_t micro_batch = 8;   // B: sequences per micro-batch
  int64_t grad_accum = 1;    // micro-batches per optimizer step
  int64_t steps = 100;       // optimizer steps
  uint64_t seed = 1234;      // parameter init and data order
  int64_t log_every = 10;    // steps between progress lines
  int64_t eval_every = 0;    // steps between validation passes (0: only at the end)
  int64_t eval_batches = 8;  // micro-batches per validation pass
  // The gradient noise scale's moving-average decay (optim/noise_scale.h; 0.99 averages ~100
  // steps). Measured when a step has two or more gradient estimates (dp ranks, or micro-batches
  // under ZeRO-2/3).
  double noise_scale_decay = 0.99;
  // Also write TensorBoard event files beside metrics.jsonl (train/tensorboard.h).
  bool tensorboard = false;
};

struct OptimConfig {
  std::string name = "adamw";  // adamw | lamb | sgd (beta1 = momentum; DiLoCo's parity test)
  double lr = 3e-4;
  double min_lr = 3e-5;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;           // global norm; 0 disables
  std::string schedule = "cosine";  // constant | cosine | wsd
  int64_t warmup_steps = 0;
  double decay_fraction = 0.2;  // wsd: fraction of steps in the final decay
};

// One source of a mixture: a shards directory and its weight (weights need not sum to 1).
struct DataSourceConfig {
  std::string path;
  double weight = 1.0;
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
  // Packed sequences (docs/data.md): documents end with the document-end token. document_mask:
  // attention stays inside each document; restart_positions: RoPE positions restart at every
  // document; mask_boundary_loss: the prediction made at a document's last token (of the next
  // document's first token) is left out of the loss. document_end_id: -1 = the shards' metadata
  // "document_end_id", else their tokenizer's <|eos|> (markov and random data have none).
  bool document_mask = false;
  bool restart_positions = false;
  bool mask_boundary_loss = false;
  int64_t document_end_id = -1;
  // Mixtures (source = "shards", no path): shards directories blended by weight, keyed by global
  // sample index (data/mixture.h). on_exhausted: "wrap" (a source that runs out starts its next
  // epoch) or "stop" (the run ends before the step that would start one).
  std::vector<DataSourceConfig> sources;
  std::string on_exhausted = "wrap";
};

// [parallel]: the layout. Data parallelism over `dp` processes (started by `trillion launch -n
// dp`), ZeRO stage 0-3 and the gradient bucket size; the pipeline schedule each rank runs
// (`schedule`, with `chunks` model chunks per rank; with pp = 1 the chunks are stages of one
// process) and whether backward passes are split into dgrad and wgrad. tp, pp, cp and ep are
// read so `trillion inspect` can show any layout; tp trains (Megatron-style, with sp), cp trains
// with ring attention over the `cp_split` of each sequence (docs/context-parallel.md).
// train.micro_batch is the global micro-batch: each dp rank runs micro_batch / dp sequences of it,
// so any dp trains the same run (docs/multiprocess.md).
struct ParallelConfig {
  int64_t dp = 1;
  int64_t tp = 1, pp = 1, cp = 1, ep = 1;
  std::string cp_split = "zigzag";  // zigzag (load-balanced) | contiguous (model/sequence_split.h)
  // MLA under cp: what the ring carries (plan/context_ring.h): auto (the fewer bytes per token) |
  // heads (per-head K/V) | latent (rmsnorm(c_kv) | k_rope, up-projected by each receiver).
  std::string cp_mla = "auto";
  int64_t zero = 0;         // 0: all-reduce; 1: optimizer state; 2: + gradients; 3: + parameters
  double bucket_mb = 25.0;  // gradient bucket size in MB (1e6 bytes), stages 0-2
  bool overlap = true;      // false: wait for each bucket at once (to measure what overlap hides)
  std::string schedule = "1f1b";  // gpipe | 1f1b | interleaved | zb-h1 | zb-h2 | dualpipe
  int64_t chunks = 1;             // model chunks per rank (interleaved: >= 2)
  // Layers per pipeline stage: "even" (the first L mod S stages one more) or the counts in stage
  // order, "1/3" (as `plan --layout partition=`; plan/stage_partition.h engine_partition).
  std::string partition = "even";
  std::vector<int> stage_layers() const;  // {} for even; throws Error naming the key
  bool split_backward = false;    // run every backward as separate B (dgrad) and W (wgrad) passes
  // Sequence parallelism with tp > 1 (Korthikanti et al. 2205.05198): norms and residual adds on
  // the rank's N/tp token rows, all-gather / reduce-scatter instead of all-reduces.
  bool sp = true;
  // How the routed experts of MoE layers use the tp ranks (docs/moe.md, "Experts and tensor
  // parallelism"): 1: each tp rank holds whole experts, the expert group spanning tp x ep (every
  // token routed once, on its SP slice); = tp: every expert split over tp along its width
  // (Megatron's expert-tensor-parallel size). 1 or tp.
  int64_t expert_tp = 1;
  // How every group all-reduces (comm/algorithms): the MPI library's, an explicit ring, or
  // hierarchical over nodes of ranks_per_node consecutive world ranks (0: one node).
  std::string allreduce = "mpi";  // mpi | ring | hierarchical
  int64_t ranks_per_node = 0;
  int64_t world_size() const { return dp * tp * pp * cp; }
};

// [emulate]: slow links between `sites` (e.g. data centres) on one machine (comm/link_emulator.h),
// so cross-site training is measured, not assumed. Sites split the data-parallel replicas into
// equal blocks of dp coordinates (site = dp_rank / (dp / sites)), as the planner assumes; every
// message between ranks on different sites takes latency + bytes / bandwidth.
struct EmulateConfig {
  int64_t sites = 1;      // 1: no emulation
  double latency_ms = 0;  // one way (1,000 km of fibre is ~5 ms)
  double gbps = 0;        // per rank pair, Gb/s; 0: no bandwidth limit
};

// [diloco]: DiLoCo (Douillard et al. 2311.08105) and Streaming DiLoCo (2501.18512), train/diloco.h.
// The dp replicas form `islands` equal groups (synchronous data parallelism with ZeRO inside
// each); islands take inner_steps optimizer steps alone, then average their pseudo-gradients and
// take one outer Nesterov step. `fragments` > 1 staggers the exchange over groups of layers,
// overlapped with overlap_steps inner steps and merged with `mixing`; outer_precision quantises
// what crosses between islands.
struct DilocoConfig {
  int64_t islands = 0;  // 0: off
  int64_t inner_steps = 100;
  double outer_lr = 0.7;
  double outer_momentum = 0.9;
  bool nesterov = true;
  int64_t fragments = 1;
  int64_t overlap_steps = 0;
  double mixing = 0;  // theta = mixing theta_local + (1 - mixing) theta_global; default 0.5
                      // when overlap_steps > 0, else 0 (replace)
  std::string fragment_pattern = "strided";  // strided | sequential
  std::string outer_precision = "fp32";      // fp32 | bf16 | fp4
  bool enabled() const { return islands > 0; }
};

// [guard]: what a step with a non-finite loss or gradient norm, or a loss spike, does
// (train/guard.h), and the replicas' silent-data-corruption check.
struct GuardConfig {
  int64_t max_skips = 5;    // consecutive skipped updates before on_divergence
  double spike_zscore = 0;  // > 0: a loss this many standard deviations above the mean of
                            // the last spike_window accepted losses skips its update
  int64_t spike_window = 50;
  std::string on_divergence = "stop";  // stop | rollback (to the newest checkpoint)
  int64_t max_rollbacks = 3;           // rollbacks before on_divergence stops anyway
  int64_t replica_check_every = 0;     // > 0: dp replicas compare parameter checksums
};

// [precision]: the recipe of the blocks' linear layers (precision/recipe.h): fp32 (the engine's
// dtype, bit for bit), bf16, fp8, mxfp4 or nvfp4. Master weights and Adam moments stay fp32.
// grad_dtype: the gradients kept between passes and reduced over dp, fp32 (default: 18
// bytes/parameter with a recipe, Megatron's fp32 main gradients) or bf16 (16 bytes/parameter,
// ZeRO §3.1; parallel/bf16_gradients.h).
// wgrad_hadamard: the random Hadamard transform size on the wgrad inputs (precision/hadamard.h),
// 0 = off; parsing resolves an absent key to the recipe's own (nvfp4: 16, others 0).
// bf16_blocks: "first:N,last:M" or "none", the blocks whose linear layers run in bf16
// (precision/bf16_blocks.h); empty (absent): the recipe's rule for model.n_layers. Parsing
// validates it and writes it as "first:N,last:M".
// head: the output head's GEMMs (forward, its recomputation in backward, dgrad, wgrad), "fp32"
// (default: every recipe keeps the head in fp32, as DeepSeek-V3 does) or "bf16" (bf16 operands,
// fp32 accumulation, the logits and the loss in fp32: Megatron-LM's and torchtitan's bf16
// training), which needs a recipe other than fp32 (docs/precision.md, "The output head").
struct PrecisionConfig {
  std::string recipe = "fp32";
  std::string grad_dtype = "fp32";
  int64_t wgrad_hadamard = -1;  // precision::kRecipeDefault until resolved
  std::string bf16_blocks;
  std::string head = "fp32";
};

// [checkpoint]: when checkpoints are written (interval, keep; train.checkpoint_every and
// train.keep_checkpoints are their old names, still read) and how. Synchronous by default:
// training waits for the write, and a rank holds nothing beyond its state but one write buffer
// of write_buffer_mb (its owned ranges are streamed through it). Async writes from a host
// snapshot of the rank's owned state (one shard: parameters and both moments) on a background
// thread while training goes on; it costs that shard of memory (the memory plan's checkpoint
// term), so it is opt-in (docs/fault-tolerance.md).
struct CheckpointConfig {
  int64_t interval = 0;  // steps between checkpoints (0: only at the end)
  int64_t keep = 2;      // newest checkpoints kept on disk
  bool async = false;
  double write_buffer_mb = 64;  // MiB; the sync path's staging buffer (a shard smaller caps it)
};

struct RunConfig {
  ModelConfig model;
  TrainConfig train;
  OptimConfig optim;
  DataConfig data;
  ParallelConfig parallel;
  EmulateConfig emulate;
  DilocoConfig diloco;
  GuardConfig guard;
  PrecisionConfig precision;
  CheckpointConfig checkpoint;
  std::string source;  // where it came from, for messages
};

// Parses `path`, applies `overrides` ("section.key=value"; the value is read as TOML, or as a
// string if it does not parse), validates. Throws Error naming the file, key and fix.
RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides);
// The same from TOML text (tests; `source` names it in messages).
RunConfig parse_run_config(const std::string& toml_text, const std::string& source,
                           const std::vector<std::string>& overrides);
// For tools that ask which keys of a config matter (the planner's run-config reader,
// cli/plan_run_config.h): the [sections] `text` has and the "section.key" names it sets, each in
// name order.
struct RunConfigKeys {
  std::vector<std::string> sections, keys;
};
RunConfigKeys run_config_keys(const std::string& toml_text, const std::string& source);
// `toml_text` read with `key` ("section.key") left out (`without`), and with it given another
// value of its type (`changed`: an integer +1 and x2, a number x2, 0 becoming 1; a boolean
// negated; strings, arrays and tables have none): those of these configs the engine accepts.
struct RunConfigVariants {
  std::optional<RunConfig> without;
  std::vector<RunConfig> changed;
};
RunConfigVariants run_config_variants(const std::string& toml_text, const std::string& source,
                                      const std::string& key);
// The fragment schedule's view of [diloco].
StreamingConfig streaming_config(const DilocoConfig& d);
// The fully resolved config as TOML.
std::string to_toml(const RunConfig& config);

// Whether a recipe's fp32 master and bf16 compute copy live in the ZeRO store
// (parallel/mixed_weights.h: sharded by ZeRO 1-3, every layer reading the bf16 weights). MoE
// layers (their routing bias is updated in place outside any pass) and DiLoCo (its outer step
// writes the master between steps) keep the master whole in the model's buffer instead, which
// the norms, embedding and head read directly (ZeRO <= 2 only).
bool recipe_weights_in_store(const RunConfig& config);

}  // namespace trillion
