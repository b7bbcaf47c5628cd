// `trillion generate --checkpoint DIR --prompt TEXT`: samples a continuation from a checkpoint
// (greedy at temperature 0, else temperature / top-k / top-p sampling with a seeded Philox
// stream, so a seed always gives the same text). The context window is the model's seq_len. By
// default a KV cache (model/cached_decoder.h) feeds the prompt then one token per step; once the
// text outgrows the window, each token recomputes the whole window of the last seq_len tokens at
// positions 0.., exactly as --no-kv-cache does from the start, so both paths give the same
// tokens. --stats prints tokens per second on stderr (off by default so the output is
// reproducible). Without --tokenizer, the run's own is found through its config's data.path and
// the shards' recorded tokenizer; both are relative to where training and `data prepare` ran, so
// each is tried as given, then against the run directory and each directory above it (and the
// shard directory and those above it), and the paths tried are named when none exists.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <functional>
#include <numeric>
#include <optional>
#include <sstream>

#include "cli/checkpoint_dir.h"
#include "cli/commands.h"
#include "cli/parse_arguments.h"
#include "core/philox.h"
#include "core/timer.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "model/cached_decoder.h"
#include "model/transformer.h"
#include "train/checkpoint/checkpoint.h"
#include "train/run_config.h"

namespace trillion::cli {

namespace {

struct SamplingOptions {
  double temperature = 0.8;
  int top_k = 0;       // 0: off
  double top_p = 1.0;  // 1: off
};

int32_t sample_token(const std::vector<double>& logits, const SamplingOptions& o, double u) {
  const int64_t V = static_cast<int64_t>(logits.size());
  if (o.temperature <= 0) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  std::vector<int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  int64_t keep = o.top_k > 0 ? std::min<int64_t>(o.top_k, V) : V;
  std::vector<double> p(keep);
  const double mx = logits[order[0]];
  double sum = 0;
  for (int64_t i = 0; i < keep; ++i)
    sum += p[i] = std::exp((logits[order[i]] - mx) / o.temperature);
  // Nucleus: the smallest prefix whose probability reaches top_p.
  double cum = 0;
  int64_t cut = keep;
  for (int64_t i = 0; i < keep; ++i) {
    cum += p[i] / sum;
    if (cum >= o.top_p) {
      cut = i + 1;
      break;
    }
  }
  const double total = std::accumulate(p.begin(), p.begin() + cut, 0.0);
  double r = u * total;
  for (int64_t i = 0; i < cut; ++i) {
    if ((r -= p[i]) <= 0) return order[i];
  }
  return order[cut - 1];
}

// Space-separated decimal token ids, each whole ("1,2", "1x" and "1.5" are not ids).
std::vector<int32_t> parse_ids(const std::string& text, int64_t vocab) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string word;
  while (ss >> word) {
    int64_t id = 0;
    const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), id);
    if (ec != std::errc() || end != word.data() + word.size()) {
      throw Error(fmt::format(
          "--prompt-ids: '{}' is not a token id; give space-separated integers, e.g. "
          "--prompt-ids \"1 2 3\"",
          word));
    }
    if (id < 0 || id >= vocab) {
      throw Error(
          fmt::format("--prompt-ids: token {} is outside the model vocabulary [0, {})", id, vocab));
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  if (ids.empty()) throw Error("--prompt-ids is empty: give space-separated token ids");
  return ids;
}

}  // namespace

int generate_command(int argc, char** argv) {
  CLI::App app{"Generate text from a checkpoint"};
  std::string checkpoint, prompt, prompt_ids, tokenizer_path;
  int64_t max_tokens = 100;
  uint64_t seed = 0;
  int samples = 1;
  SamplingOptions so;
  app.add_option("--checkpoint", checkpoint,
                 "checkpoint directory, or a run directory (its newest valid checkpoint)")
      ->required();
  app.add_option("--prompt", prompt, "prompt text (needs a tokenizer)");
  auto* prompt_ids_option =
      app.add_option("--prompt-ids", prompt_ids, "prompt as space-separated token ids");
  app.add_option("--tokenizer", tokenizer_path,
                 "tokenizer JSON (default: the one the run's shards were prepared with)");
  app.add_option("--max-tokens", max_tokens, "tokens to generate")->check(CLI::Range(1, 100000));
  app.add_option("--temperature", so.temperature, "0 = greedy")->check(finite_range(0, 100));
  app.add_option("--top-k", so.top_k, "keep the k most likely tokens (0: all)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            int64_t k = 0;
            const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), k);
            if (ec != std::errc() || end != text.data() + text.size() || k < 0 || k > INT32_MAX)
              return text + " is not a whole number >= 0 (0 keeps every token)";
            return std::string();
          },
          "INT >= 0"));
  app.add_option("--top-p", so.top_p, "nucleus sampling mass (1: off)")->check(finite_range(0, 1));
  app.add_option("--seed", seed, "sampling seed");
  app.add_option("--samples", samples, "independent samples to draw")->check(CLI::Range(1, 100));
  bool no_kv_cache = false, stats = false;
  app.add_flag("--stats", stats, "print tokens generated, seconds and tokens/s on stderr");
  app.add_flag("--no-kv-cache", no_kv_cache,
               "recompute the whole window for every token (the reference path)");
  if (const int rc = parse_arguments(app, argc, argv); rc >= 0) return rc;

  const PinnedCheckpoint pinned = resolve_checkpoint_dir(checkpoint, "generate");
  const std::string& dir = pinned.dir();  // retention leaves it while this reads it
  const RunConfig cfg = parse_run_config(read_checkpoint_config(dir), dir + "/config.toml", {});
  std::string no_tokenizer = "no --tokenizer was given";
  if (tokenizer_path.empty()) tokenizer_path = find_run_tokenizer(cfg, dir, no_tokenizer);
  std::optional<data::Tokenizer> tokenizer;
  if (!tokenizer_path.empty()) tokenizer.emplace(data::Tokenizer::load(tokenizer_path));
  if (tokenizer && tokenizer->vocab_size() > cfg.model.vocab_size) {
    throw Error(fmt::format("tokenizer '{}' has {} tokens but the model's vocabulary is {}",
                            tokenizer_path, tokenizer->vocab_size(), cfg.model.vocab_size));
  }
  std::vector<int32_t> context;
  if (prompt_ids_option->count() > 0) {
    context = parse_ids(prompt_ids, cfg.model.vocab_size);
  } else {
    if (!tokenizer) {
      throw Error(fmt::format(
          "no tokenizer for --prompt: {}; pass --tokenizer FILE, or --prompt-ids for a model "
          "trained on synthetic tokens",
          no_tokenizer));
    }
    context.push_back(tokenizer->bos_id());
    tokenizer->encode_append(prompt, context);
  }

  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const int64_t T = cfg.model.seq_len, V = cfg.model.vocab_size;
  Transformer model(cfg.model, {1, T}, *be, tracker);
  load_checkpoint(dir, model.parameters(), nullptr, nullptr);

  std::vector<int32_t> window(T), targets(T, 0);
  std::vector<double> logits(V);
  Buffer row(tracker, MemoryCategory::workspace, cfg.model.dtype, V);
  std::optional<CachedDecoder> cached;
  if (!no_kv_cache) cached.emplace(cfg.model, model.table(), model.parameters(), *be, tracker);
  // Logits for the next token of `seq`: from the cache while the text fits the window (feeding
  // the tokens it has not seen), else a full-window forward over the last T tokens.
  auto next_logits = [&](const std::vector<int32_t>& seq) {
    const int64_t n = static_cast<int64_t>(seq.size());
    if (cached && n <= T) {
      const Tensor* out = nullptr;
      while (cached->position() < n) out = &cached->step(seq[cached->position()]);
      be->copy(Tensor(logits.data(), DType::f64, {V}), out->view({V}));
      return;
    }
    const int64_t start = std::max<int64_t>(0, n - T), len = n - start;
    std::fill(window.begin(), window.end(), 0);
    std::copy(seq.begin() + start, seq.end(), window.begin());
    model.forward(window.data(), targets.data());
    be->gemm(row.view(0, {1, V}), false, true, model.final_hidden().rows(len - 1, len),
             model.head_weight(), 1.0, 0.0);
    be->copy(Tensor(logits.data(), DType::f64, {V}), row.flat());
  };
  const Philox rng(seed, "generate");
  int64_t generated = 0;
  const Timer timer;
  for (int s = 0; s < samples; ++s) {
    std::vector<int32_t> seq = context;
    const size_t prompt_len = seq.size();
    if (cached) cached->reset();
    for (int64_t i = 0; i < max_tokens; ++i) {
      next_logits(seq);
      const int32_t next =
          sample_token(logits, so, rng.uniform(static_cast<uint64_t>(s) << 32 | i));
      if (tokenizer && next == tokenizer->eos_id()) break;
      seq.push_back(next);
      ++generated;
    }
    std::vector<int32_t> continuation(seq.begin() + prompt_len, seq.end());
    if (samples > 1) std::printf("--- sample %d ---\n", s + 1);
    if (tokenizer) {
      std::printf("%s%s\n", prompt.c_str(), tokenizer->decode(continuation).c_str());
    } else {
      std::string ids;
      for (int32_t id : continuation) ids += (ids.empty() ? "" : " ") + std::to_string(id);
      std::printf("%s\n", ids.c_str());
    }
  }
  const double seconds = timer.seconds();
  if (stats) {
    std::fprintf(stderr, "generated %lld tokens in %.3f s: %.1f tokens/s (%s)\n",
                 static_cast<long long>(generated), seconds, generated / std::max(seconds, 1e-9),
                 cached ? "kv cache" : "full window");
    if (cached) {
      // Beside the same width's multi-head cache (2 C per layer) and a grouped one with an eighth
      // of the heads as KV heads (Llama 3's ratio).
      const ModelConfig& m = cfg.model;
      const int64_t elem = static_cast<int64_t>(dtype_size(m.dtype));
      const int64_t head = m.d_model / m.n_heads, kv8 = std::max<int64_t>(1, m.n_heads / 8);
      std::fprintf(stderr,
                   "kv cache: %lld bytes per token (%s); at d_model %lld: MHA %lld, GQA with %lld "
                   "KV heads %lld\n",
                   static_cast<long long>(cached->cache_bytes_per_token()),
                   m.mla ? "MLA: the kv latent and the rope key" : "keys and values",
                   static_cast<long long>(m.d_model),
                   static_cast<long long>(m.n_layers * 2 * m.d_model * elem),
                   static_cast<long long>(kv8),
                   static_cast<long long>(m.n_layers * 2 * kv8 * head * elem));
    }
  }
  return 0;
}

}  // namespace trillion::cli
