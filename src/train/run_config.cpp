// See run_config.h. The only translation unit that includes toml++ (it is heavy to compile).
#include "train/run_config.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "comm/algorithms/algorithm_kind.h"
#include "core/error.h"
#include "model/sequence_split.h"
#include "optim/outer_nesterov.h"
#include "optim/outer_quantize.h"
#include "optim/streaming_schedule.h"
#include "precision/recipe.h"
#include "schedule/action.h"
#include "train/toml_subset.h"

namespace trillion {

namespace {

// Tensor parallelism splits heads, kv heads, the MLP's hidden width and the vocabulary over tp
// (model/local_shape.h); sequence parallelism splits each rank's B*T token rows. Each value tp
// must divide is named with the fix.
// Context parallelism: the split must cut every sequence into equal chunks, and the attention
// core must be the tiled one (ring attention merges (out, lse) blocks; the materialised core keeps
// a T x T matrix a rank never has).
void check_context_parallel(const RunConfig& rc, const std::string& source) {
  const ParallelConfig& p = rc.parallel;
  CpSplit kind;
  try {
    kind = parse_cp_split(p.cp_split, "parallel.cp_split");
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", source, e.what()));
  }
  if (p.cp == 1) return;
  const SequenceSplit split{static_cast<int>(p.cp), kind};
  if (rc.model.seq_len % split.chunks() != 0) {
    throw Error(fmt::format(
        "{}: parallel.cp = {} with parallel.cp_split = \"{}\" cuts each sequence into {} equal "
        "chunks, but model.seq_len = {} is not a multiple of {}; choose a seq_len divisible by "
        "{} (or another cp)",
        source, p.cp, p.cp_split, split.chunks(), rc.model.seq_len, split.chunks(),
        split.chunks()));
  }
  if (!rc.model.tiled_attention) {
    throw Error(fmt::format(
        "{}: parallel.cp = {} needs model.attention = \"tiled\" (ring attention merges "
        "FlashAttention blocks; the materialised attention keeps the whole T x T matrix)",
        source, p.cp));
  }
}

void check_tensor_parallel(const RunConfig& rc, const std::string& source) {
  const int64_t tp = rc.parallel.tp;
  if (tp == 1) return;
  const ModelConfig& m = rc.model;
  auto divides = [&](const char* key, int64_t v, const char* fix) {
    if (v % tp != 0) {
      throw Error(
          fmt::format("{}: parallel.tp = {} does not divide {} = {}; {}", source, tp, key, v, fix));
    }
  };
  divides("model.n_heads", m.n_heads, "choose a tp that divides the attention heads");
  divides("model.n_kv_heads", m.n_kv_heads,
          "choose a tp that divides the key/value heads (kv heads are not replicated over tp)");
  divides("model.ffn_hidden", m.ffn_hidden, "choose a tp that divides the MLP width");
  divides("model.vocab_size", m.vocab_size,
          "pad the vocabulary to a multiple of tp (the embedding and head are split by "
          "vocabulary rows; the vocabulary is not padded for you)");
  const int64_t dp = std::max<int64_t>(1, rc.parallel.dp);
  const int64_t cp = std::max<int64_t>(1, rc.parallel.cp);
  const int64_t tokens = rc.train.micro_batch / dp * m.seq_len / cp;
  if (rc.parallel.sp && tokens % tp != 0) {
    throw Error(fmt::format(
        "{}: parallel.sp = true with parallel.tp = {}: sequence parallelism splits each rank's "
        "train.micro_batch / dp x model.seq_len / cp = {} token rows over tp, which {} does not "
        "divide; change seq_len or micro_batch, or set parallel.sp = false",
        source, tp, tokens, tp));
  }
}

// Reads typed keys of one [section], remembering which were used so leftovers are reported.
class SectionReader {
 public:
  SectionReader(const toml::table* table, std::string section, std::string source)
      : table_(table), section_(std::move(section)), source_(std::move(source)) {}

  template <typename T>
  void read(const char* key, T& out) {
    used_.insert(key);
    if (table_ == nullptr) return;
    const toml::node* node = table_->get(key);
    if (node == nullptr) return;
    if constexpr (std::is_same_v<T, bool>) {
      if (auto v = node->value<bool>()) return void(out = *v);
    } else if constexpr (std::is_integral_v<T>) {
      // Only an integer node: value<int64_t>() would convert a float such as 2e44 (undefined
      // behaviour out of range; found by fuzz_run_config).
      if (node->is_integer()) return void(out = static_cast<T>(*node->value<int64_t>()));
    } else if constexpr (std::is_floating_point_v<T>) {
      if (auto v = node->value<double>()) return void(out = *v);
    } else {
      if (auto v = node->value<std::string>()) return void(out = *v);
    }
    throw Error(fmt::format("{}: {}.{} has the wrong type (expected {})", source_, section_, key,
                            type_name<T>()));
  }

  void reject_unknown() const {
    if (table_ == nullptr) return;
    for (const auto& [key, node] : *table_) {
      if (!used_.count(std::string(key.str()))) {
        throw Error(fmt::format("{}: unknown key '{}.{}' (known keys: {})", source_, section_,
                                key.str(), known()));
      }
    }
  }

 private:
  template <typename T>
  static const char* type_name() {
    if constexpr (std::is_same_v<T, bool>) return "true or false";
    if constexpr (std::is_integral_v<T>) return "an integer";
    if constexpr (std::is_floating_point_v<T>) return "a number";
    return "a string";
  }
  std::string known() const {
    std::string s;
    for (const auto& k : used_) s += (s.empty() ? "" : ", ") + k;
    return s;
  }
  const toml::table* table_;
  std::string section_, source_;
  std::set<std::string> used_;
};

// A config number that is NaN or infinite can only make the run NaN: refused by name.
void finite(const std::string& source, const char* key, double value) {
  if (!std::isfinite(value)) {
    throw Error(fmt::format("{}: {} = {} is not a finite number", source, key, value));
  }
}

// Model fields whose bad values ModelConfig::validate() lets through but that can only give
// NaN or a run that learns nothing (kept here: model/config.cpp is shared with the planner's
// model files, which have their own checks).
void validate_model_numerics(const ModelConfig& mc, const std::string& source) {
  finite(source, "model.rope_theta", mc.rope_theta);
  finite(source, "model.norm_eps", mc.norm_eps);
  finite(source, "model.init_std", mc.init_std);
  if (mc.vocab_size < 2) {
    throw Error(
        fmt::format("{}: model.vocab_size = {} must be >= 2 (with one token the loss is "
                    "0 and nothing is learned)",
                    source, mc.vocab_size));
  }
  if (mc.recompute == plan::Recompute::kFull && mc.recompute_every > mc.n_layers) {
    throw Error(
        fmt::format("{}: model.recompute = '{}' recomputes every {}th layer but the model "
                    "has {} layers; use full:K with K <= {}",
                    source, mc.recompute_string(), mc.recompute_every, mc.n_layers, mc.n_layers));
  }
  constexpr int64_t kMaxSeqLen = int64_t{1} << 24;  // the data loader indexes windows with int
  if (mc.seq_len > kMaxSeqLen) {
    throw Error(
        fmt::format("{}: model.seq_len = {} exceeds {} (2^24)", source, mc.seq_len, kMaxSeqLen));
  }
}

void apply_override(toml::table& root, const std::string& assignment, const std::string& source) {
  const size_t eq = assignment.find('=');
  const size_t dot = assignment.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq) {
    throw Error(fmt::format("--set '{}': expected section.key=value, e.g. --set train.steps=100",
                            assignment));
  }
  const std::string section = assignment.substr(0, dot);
  const std::string key = assignment.substr(dot + 1, eq - dot - 1);
  const std::string value = assignment.substr(eq + 1);
  if (root.contains(section) && !root[section].is_table()) {  // fuzz finding: was a null table
    throw Error(fmt::format("--set '{}': {} in {} is not a [table]; fix the config file",
                            assignment, section, source));
  }
  if (!root.contains(section)) root.insert(section, toml::table{});
  toml::table* table = root[section].as_table();
  try {
    check_toml_subset("v = " + value, "--set");
    toml::table parsed = toml::parse("v = " + value);
    const toml::node* node = parsed.get("v");
    if (node == nullptr) throw Error("no value");
    table->insert_or_assign(key, *node);
  } catch (const std::exception&) {  // not TOML (parse_error), or not a run-config value (Error)
    table->insert_or_assign(key, value);  // a bare word: take it as a string
  }
}

// The keys that have an old name (issue 15 names them [checkpoint] interval and keep).
constexpr std::pair<const char*, const char*> kRenamed[] = {
    {"checkpoint.interval", "train.checkpoint_every"},
    {"checkpoint.keep", "train.keep_checkpoints"}};
constexpr int64_t kUnset = std::numeric_limits<int64_t>::min();

// A --set of one name of a renamed key replaces the file's value under the other name too (so a
// resolved config.toml takes --set train.checkpoint_every); two --set of the two names are kept
// and must agree.
void drop_other_name(toml::table& root, const std::string& assignment,
                     std::set<std::string>& set_keys) {
  const std::string key = assignment.substr(0, assignment.find('='));
  set_keys.insert(key);
  for (const auto& [name, old_name] : kRenamed) {
    const std::string other = key == name ? old_name : key == old_name ? name : "";
    if (other.empty() || set_keys.contains(other)) continue;
    const size_t dot = other.find('.');
    if (toml::table* t = root[other.substr(0, dot)].as_table()) t->erase(other.substr(dot + 1));
  }
}

// The value of a key that may be given under its name or its old one (kUnset: not given).
int64_t one_of_two_names(const std::string& source, const char* name, int64_t value,
                         const char* old_name, int64_t old_value, int64_t fallback) {
  if (value != kUnset && old_value != kUnset && value != old_value) {
    throw Error(
        fmt::format("{}: {} = {} and {} = {} disagree: {} is the old name of {}; set one "
                    "of them",
                    source, name, value, old_name, old_value, old_name, name));
  }
  return value != kUnset ? value : old_value != kUnset ? old_value : fallback;
}

}  // namespace

RunConfig parse_run_config(const std::string& text, const std::string& source,
                           const std::vector<std::string>& overrides) {
  toml::table root;
  check_toml_subset(text, source);
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw Error(fmt::format("{}:{}:{}: {}", source, e.source().begin.line, e.source().begin.column,
                            e.description()));
  }
  std::set<std::string> set_keys;
  for (const std::string& o : overrides) {
    apply_override(root, o, source);
    drop_other_name(root, o, set_keys);
  }
  for (const auto& [key, node] : root) {
    const std::string k(key.str());
    if (k != "model" && k != "train" && k != "optim" && k != "data" && k != "parallel" &&
        k != "emulate" && k != "diloco" && k != "guard" && k != "precision" && k != "checkpoint") {
      throw Error(
          fmt::format("{}: unknown section [{}] (sections: model, train, optim, data, "
                      "parallel, emulate, diloco, guard, precision, checkpoint)",
                      source, k));
    }
    if (!node.is_table()) throw Error(fmt::format("{}: '{}' must be a [table]", source, k));
  }
  RunConfig rc;
  rc.source = source;

  SectionReader m(root["model"].as_table(), "model", source);
  ModelConfig& mc = rc.model;
  std::string dtype = std::string(dtype_name(mc.dtype));
  m.read("vocab_size", mc.vocab_size);
  m.read("d_model", mc.d_model);
  m.read("n_layers", mc.n_layers);
  m.read("n_heads", mc.n_heads);
  m.read("n_kv_heads", mc.n_kv_heads);
  m.read("head_dim", mc.head_dim);
  m.read("ffn_hidden", mc.ffn_hidden);
  m.read("seq_len", mc.seq_len);
  m.read("tied_embeddings", mc.tied_embeddings);
  m.read("rope_theta", mc.rope_theta);
  m.read("norm_eps", mc.norm_eps);
  m.read("init_std", mc.init_std);
  m.read("dtype", dtype);
  std::string recompute = mc.recompute_string();
  std::string attention = mc.tiled_attention ? "tiled" : "materialized";
  m.read("recompute", recompute);
  m.read("attention", attention);
  m.read("attention_block", mc.attention_block);
  m.read("n_dense_layers", mc.moe.n_dense_layers);
  m.read("n_routed_experts", mc.moe.n_routed_experts);
  m.read("n_shared_experts", mc.moe.n_shared_experts);
  m.read("top_k", mc.moe.top_k);
  m.read("expert_ffn", mc.moe.expert_ffn);
  m.read("router", mc.moe.router);
  m.read("bias_update_rate", mc.moe.bias_update_rate);
  m.read("balance_loss_alpha", mc.moe.balance_loss_alpha);
  m.read("capacity_factor", mc.moe.capacity_factor);
  m.read("max_groups", mc.moe.max_groups);
  m.reject_unknown();
  try {
    mc.dtype = parse_dtype(dtype);
    mc.set_recompute(recompute);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", source, e.what()));
  }
  if (attention != "tiled" && attention != "materialized") {
    throw Error(fmt::format("{}: model.attention = '{}': expected tiled or materialized", source,
                            attention));
  }
  mc.tiled_attention = attention == "tiled";
  try {
    mc.validate();
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", source, e.what()));
  }
  validate_model_numerics(mc, source);

  SectionReader t(root["train"].as_table(), "train", source);
  TrainConfig& tc = rc.train;
  t.read("micro_batch", tc.micro_batch);
  t.read("grad_accum", tc.grad_accum);
  t.read("steps", tc.steps);
  t.read("seed", tc.seed);
  t.read("log_every", tc.log_every);
  t.read("eval_every", tc.eval_every);
  t.read("eval_batches", tc.eval_batches);
  // The old names of checkpoint.interval and checkpoint.keep (read with [checkpoint] below).
  int64_t old_interval = kUnset, old_keep = kUnset;
  t.read("checkpoint_every", old_interval);
  t.read("keep_checkpoints", old_keep);
  t.read("noise_scale_decay", tc.noise_scale_decay);
  t.read("tensorboard", tc.tensorboard);
  t.reject_unknown();
  auto at_least = [&](const char* key, int64_t v, int64_t lo) {
    if (v < lo) throw Error(fmt::format("{}: {} = {} must be >= {}", source, key, v, lo));
  };
  at_least("train.micro_batch", tc.micro_batch, 1);
  at_least("train.grad_accum", tc.grad_accum, 1);
  at_least("train.steps", tc.steps, 0);
  at_least("train.log_every", tc.log_every, 1);
  at_least("train.eval_every", tc.eval_every, 0);
  at_least("train.eval_batches", tc.eval_batches, 1);
  if (!(tc.noise_scale_decay >= 0 && tc.noise_scale_decay < 1)) {
    throw Error(
        fmt::format("{}: train.noise_scale_decay = {} must be in [0, 1) (0.99 averages "
                    "over ~100 steps)",
                    source, tc.noise_scale_decay));
  }
  // Upper bounds keep every index the trainer forms from these (the global sample index
  // steps x grad_accum x micro_batch, tokens per step) inside int64.
  auto at_most = [&](const char* key, int64_t v, int64_t hi) {
    if (v > hi) throw Error(fmt::format("{}: {} = {} must be <= {}", source, key, v, hi));
  };
  at_most("train.micro_batch", tc.micro_batch, int64_t{1} << 20);
  at_most("train.grad_accum", tc.grad_accum, int64_t{1} << 20);
  at_most("train.eval_batches", tc.eval_batches, int64_t{1} << 20);
  at_most("train.steps", tc.steps, int64_t{1} << 40);
  if (tc.steps > (int64_t{1} << 62) / (tc.micro_batch * tc.grad_accum)) {
    throw Error(
        fmt::format("{}: train.steps x grad_accum x micro_batch = {} x {} x {} exceeds "
                    "2^62 samples",
                    source, tc.steps, tc.grad_accum, tc.micro_batch));
  }

  SectionReader o(root["optim"].as_table(), "optim", source);
  OptimConfig& oc = rc.optim;
  o.read("name", oc.name);
  o.read("lr", oc.lr);
  o.read("min_lr", oc.min_lr);
  o.read("beta1", oc.beta1);
  o.read("beta2", oc.beta2);
  o.read("eps", oc.eps);
  o.read("weight_decay", oc.weight_decay);
  o.read("grad_clip", oc.grad_clip);
  o.read("schedule", oc.schedule);
  o.read("warmup_steps", oc.warmup_steps);
  o.read("decay_fraction", oc.decay_fraction);
  o.reject_unknown();
  if (oc.name != "adamw" && oc.name != "lamb" && oc.name != "sgd") {
    throw Error(fmt::format("{}: optim.name = '{}': supported optimizers: adamw, lamb, sgd", source,
                            oc.name));
  }
  finite(source, "optim.lr", oc.lr);
  finite(source, "optim.min_lr", oc.min_lr);
  if (!(oc.lr > 0) || oc.min_lr < 0 || oc.min_lr > oc.lr) {
    throw Error(
        fmt::format("{}: need 0 <= optim.min_lr <= optim.lr and optim.lr > 0 (got lr {}, "
                    "min_lr {})",
                    source, oc.lr, oc.min_lr));
  }
  if (!(oc.beta1 >= 0 && oc.beta1 < 1 && oc.beta2 >= 0 && oc.beta2 < 1)) {
    throw Error(fmt::format("{}: optim.beta1/beta2 must be in [0, 1)", source));
  }
  finite(source, "optim.eps", oc.eps);
  if (!(oc.eps > 0)) {
    throw Error(
        fmt::format("{}: optim.eps = {} must be > 0 (it keeps the update's denominator "
                    "from 0; 1e-8 is usual)",
                    source, oc.eps));
  }
  finite(source, "optim.weight_decay", oc.weight_decay);
  if (oc.weight_decay < 0) {
    throw Error(fmt::format("{}: optim.weight_decay = {} must be >= 0", source, oc.weight_decay));
  }
  finite(source, "optim.grad_clip", oc.grad_clip);
  if (oc.grad_clip < 0) {
    throw Error(fmt::format("{}: optim.grad_clip = {} must be >= 0 (0 disables clipping)", source,
                            oc.grad_clip));
  }
  if (!(oc.decay_fraction >= 0 && oc.decay_fraction <= 1)) {
    throw Error(
        fmt::format("{}: optim.decay_fraction = {} must be in [0, 1]", source, oc.decay_fraction));
  }
  at_least("optim.warmup_steps", oc.warmup_steps, 0);
  if (oc.schedule != "constant" && oc.schedule != "cosine" && oc.schedule != "wsd") {
    throw Error(fmt::format("{}: optim.schedule = '{}': expected constant, cosine or wsd", source,
                            oc.schedule));
  }

  SectionReader d(root["data"].as_table(), "data", source);
  DataConfig& dc = rc.data;
  d.read("source", dc.source);
  d.read("path", dc.path);
  d.read("order", dc.order);
  d.read("vocab", dc.vocab);
  d.read("seed", dc.seed);
  d.read("tokens", dc.tokens);
  d.read("val_tokens", dc.val_tokens);
  d.read("sharpness", dc.sharpness);
  d.reject_unknown();
  if (dc.source != "random" && dc.source != "markov" && dc.source != "shards") {
    throw Error(fmt::format("{}: data.source = '{}': expected random, markov or shards", source,
                            dc.source));
  }
  if (dc.order < 1 || dc.order > 64) {
    throw Error(fmt::format("{}: data.order = {} must be in [1, 64]", source, dc.order));
  }
  if (dc.vocab != 0 && dc.vocab < 2) {
    throw Error(
        fmt::format("{}: data.vocab = {} must be >= 2 (or 0: model.vocab_size)", source, dc.vocab));
  }
  at_least("data.tokens", dc.tokens, 1);
  at_least("data.val_tokens", dc.val_tokens, 0);
  finite(source, "data.sharpness", dc.sharpness);
  // toml++ writes a string holding a newline as '''...''' even when it also holds ''', which
  // then does not parse back (the resolved config a run directory records; fuzz finding): no
  // path needs a control character.
  for (const char ch : dc.path) {
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) {
      throw Error(
          fmt::format("{}: data.path contains the control character \\x{:02x}; give a "
                      "plain path",
                      source, static_cast<unsigned char>(ch)));
    }
  }
  if (dc.source == "shards" && dc.path.empty()) {
    throw Error(
        fmt::format("{}: data.source = 'shards' needs data.path (the output of 'trillion "
                    "data prepare')",
                    source));
  }
  SectionReader p(root["parallel"].as_table(), "parallel", source);
  ParallelConfig& pc = rc.parallel;
  p.read("dp", pc.dp);
  p.read("tp", pc.tp);
  p.read("pp", pc.pp);
  p.read("cp", pc.cp);
  p.read("cp_split", pc.cp_split);
  p.read("ep", pc.ep);
  p.read("zero", pc.zero);
  p.read("bucket_mb", pc.bucket_mb);
  p.read("overlap", pc.overlap);
  p.read("schedule", pc.schedule);
  p.read("chunks", pc.chunks);
  p.read("split_backward", pc.split_backward);
  p.read("sp", pc.sp);
  p.read("allreduce", pc.allreduce);
  p.read("ranks_per_node", pc.ranks_per_node);
  p.reject_unknown();
  at_least("parallel.dp", pc.dp, 1);
  at_least("parallel.tp", pc.tp, 1);
  at_least("parallel.pp", pc.pp, 1);
  at_least("parallel.cp", pc.cp, 1);
  at_least("parallel.ep", pc.ep, 1);
  at_least("parallel.chunks", pc.chunks, 1);
  check_tensor_parallel(rc, source);
  check_context_parallel(rc, source);
  try {
    schedule::parse_schedule_kind(pc.schedule);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: parallel.schedule: {}", source, e.what()));
  }
  if (pc.zero < 0 || pc.zero > 3) {
    throw Error(
        fmt::format("{}: parallel.zero = {}: expected a ZeRO stage 0, 1, 2 or 3", source, pc.zero));
  }
  if (!(pc.bucket_mb > 0) || !std::isfinite(pc.bucket_mb)) {
    throw Error(fmt::format("{}: parallel.bucket_mb = {} must be > 0 (25 is a good default)",
                            source, pc.bucket_mb));
  }
  if (rc.train.micro_batch % pc.dp != 0) {
    throw Error(
        fmt::format("{}: parallel.dp = {} does not divide train.micro_batch = {} (the "
                    "global micro-batch is split over the dp ranks); choose a dp that "
                    "divides it",
                    source, pc.dp, rc.train.micro_batch));
  }
  try {
    comm::parse_algorithm(pc.allreduce, "parallel.allreduce");
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", source, e.what()));
  }
  at_least("parallel.ranks_per_node", pc.ranks_per_node, 0);

  SectionReader em(root["emulate"].as_table(), "emulate", source);
  EmulateConfig& ec = rc.emulate;
  em.read("sites", ec.sites);
  em.read("latency_ms", ec.latency_ms);
  em.read("gbps", ec.gbps);
  em.reject_unknown();
  at_least("emulate.sites", ec.sites, 1);
  if (pc.dp % ec.sites != 0) {
    throw Error(fmt::format(
        "{}: emulate.sites = {} does not divide parallel.dp = {} (sites split the data-parallel "
        "replicas into equal blocks)",
        source, ec.sites, pc.dp));
  }
  if (!(ec.latency_ms >= 0) || !(ec.gbps >= 0)) {
    throw Error(fmt::format(
        "{}: emulate.latency_ms = {} and emulate.gbps = {} must be >= 0 (gbps 0: no limit)", source,
        ec.latency_ms, ec.gbps));
  }

  SectionReader gd(root["guard"].as_table(), "guard", source);
  GuardConfig& gc = rc.guard;
  gd.read("max_skips", gc.max_skips);
  gd.read("spike_zscore", gc.spike_zscore);
  gd.read("spike_window", gc.spike_window);
  gd.read("on_divergence", gc.on_divergence);
  gd.read("max_rollbacks", gc.max_rollbacks);
  gd.read("replica_check_every", gc.replica_check_every);
  gd.reject_unknown();
  at_least("guard.max_skips", gc.max_skips, 1);
  at_least("guard.spike_window", gc.spike_window, 2);
  at_least("guard.max_rollbacks", gc.max_rollbacks, 0);
  at_least("guard.replica_check_every", gc.replica_check_every, 0);
  if (!std::isfinite(gc.spike_zscore) || gc.spike_zscore < 0) {
    throw Error(
        fmt::format("{}: guard.spike_zscore = {} must be a finite number >= 0 (0: no "
                    "spike detection; 6 is a cautious threshold)",
                    source, gc.spike_zscore));
  }
  if (gc.on_divergence != "stop" && gc.on_divergence != "rollback") {
    throw Error(fmt::format("{}: guard.on_divergence = '{}': expected stop or rollback", source,
                            gc.on_divergence));
  }
  if (gc.replica_check_every > 0 && pc.zero >= 3) {
    throw Error(fmt::format(
        "{}: guard.replica_check_every needs replicated parameters, but parallel.zero = 3 shards "
        "them (each dp rank holds a different part); use zero <= 2 or set it to 0",
        source));
  }

  SectionReader ck(root["checkpoint"].as_table(), "checkpoint", source);
  ck.read("async", rc.checkpoint.async);
  ck.read("write_buffer_mb", rc.checkpoint.write_buffer_mb);
  int64_t interval = kUnset, keep = kUnset;
  ck.read("interval", interval);
  ck.read("keep", keep);
  ck.reject_unknown();
  rc.checkpoint.interval =
      one_of_two_names(source, "checkpoint.interval", interval, "train.checkpoint_every",
                       old_interval, rc.checkpoint.interval);
  rc.checkpoint.keep = one_of_two_names(source, "checkpoint.keep", keep, "train.keep_checkpoints",
                                        old_keep, rc.checkpoint.keep);
  // A bad value is named by the key it was given under.
  at_least(interval == kUnset && old_interval != kUnset ? "train.checkpoint_every"
                                                        : "checkpoint.interval",
           rc.checkpoint.interval, 0);
  at_least(keep == kUnset && old_keep != kUnset ? "train.keep_checkpoints" : "checkpoint.keep",
           rc.checkpoint.keep, 1);
  // 4 KiB: a page; below it the buffer costs more system calls than it saves memory.
  if (!(rc.checkpoint.write_buffer_mb >= 1.0 / 256) || !(rc.checkpoint.write_buffer_mb <= 65536)) {
    throw Error(
        fmt::format("{}: checkpoint.write_buffer_mb = {} must be between 0.00390625 (4 "
                    "KiB) and 65536; 64 is the default",
                    source, rc.checkpoint.write_buffer_mb));
  }

  SectionReader pr(root["precision"].as_table(), "precision", source);
  pr.read("recipe", rc.precision.recipe);
  pr.read("grad_dtype", rc.precision.grad_dtype);
  rc.precision.wgrad_hadamard = precision::kRecipeDefault;
  pr.read("wgrad_hadamard", rc.precision.wgrad_hadamard);
  pr.read("bf16_blocks", rc.precision.bf16_blocks);
  pr.reject_unknown();
  try {
    precision::recipe_named(rc.precision.recipe);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: precision.recipe: {}", source, e.what()));
  }
  try {
    rc.precision.wgrad_hadamard =
        precision::recipe_with(rc.precision.recipe, rc.precision.wgrad_hadamard).wgrad_hadamard;
  } catch (const Error& e) {
    throw Error(fmt::format("{}: precision.{}", source, e.what()));
  }
  if (!rc.precision.bf16_blocks.empty()) {
    try {
      rc.precision.bf16_blocks = precision::bf16_blocks_text(
          precision::resolve_bf16_blocks(precision::recipe_named(rc.precision.recipe),
                                         rc.model.n_layers, rc.precision.bf16_blocks));
    } catch (const Error& e) {
      throw Error(fmt::format("{}: precision.{}", source, e.what()));
    }
  }
  if (rc.precision.recipe != "fp32" && rc.model.dtype != DType::f32) {
    throw Error(fmt::format(
        "{}: precision.recipe = '{}' rounds fp32 GEMM inputs, but model.dtype = '{}'; use "
        "model.dtype = \"f32\" (f64 is for gradient checks, with recipe fp32)",
        source, rc.precision.recipe, dtype_name(rc.model.dtype)));
  }

  SectionReader dl(root["diloco"].as_table(), "diloco", source);
  DilocoConfig& di = rc.diloco;
  double mixing = std::nan("");
  dl.read("islands", di.islands);
  dl.read("inner_steps", di.inner_steps);
  dl.read("outer_lr", di.outer_lr);
  dl.read("outer_momentum", di.outer_momentum);
  dl.read("nesterov", di.nesterov);
  dl.read("fragments", di.fragments);
  dl.read("overlap_steps", di.overlap_steps);
  dl.read("mixing", mixing);
  dl.read("fragment_pattern", di.fragment_pattern);
  dl.read("outer_precision", di.outer_precision);
  dl.reject_unknown();
  // Streaming DiLoCo mixes an overlapped fragment half and half (2501.18512 §2.3); without
  // overlap the global fragment replaces the local one (DiLoCo).
  di.mixing = std::isnan(mixing) ? (di.overlap_steps > 0 ? 0.5 : 0.0) : mixing;
  at_least("diloco.islands", di.islands, 0);
  if (di.enabled()) {
    try {
      if (pc.cp > 1 && di.islands > 1) {  // an island would be a dp x cp group: not planned
        throw Error(
            fmt::format("parallel.cp = {} with diloco.islands = {}: DiLoCo islands of "
                        "context-parallel ranks are not in this build; use cp = 1",
                        pc.cp, di.islands));
      }
      if (pc.dp % di.islands != 0) {
        throw Error(fmt::format(
            "diloco.islands = {} does not divide parallel.dp = {} (each island holds dp / "
            "islands data-parallel replicas)",
            di.islands, pc.dp));
      }
      if (mc.dtype != DType::f32) {
        throw Error(
            fmt::format("diloco needs model.dtype = \"f32\" (got \"{}\"): the outer "
                        "optimizer and the quantised exchange are fp32",
                        dtype_name(mc.dtype)));
      }
      if (schedule::parse_schedule_kind(pc.schedule) == schedule::ScheduleKind::kDualPipe) {
        throw Error(
            "diloco with parallel.schedule = \"dualpipe\" is not supported (its two model copies "
            "would need one outer state); use another schedule");
      }
      if (pc.ep > 1) {
        throw Error(fmt::format(
            "diloco with parallel.ep = {} is not supported (the outer optimizer covers the dense "
            "replicas' state only); use parallel.ep = 1",
            pc.ep));
      }
      OuterNesterov(0, {di.outer_lr, di.outer_momentum, di.nesterov});  // checks lr, momentum
      parse_outer_precision(di.outer_precision, "diloco.outer_precision");
      if (di.fragment_pattern != "strided" && di.fragment_pattern != "sequential") {
        throw Error(fmt::format("diloco.fragment_pattern = '{}': expected strided or sequential",
                                di.fragment_pattern));
      }
      FragmentSchedule(streaming_config(di), static_cast<int>(mc.n_layers));  // checks the rest
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}", source, e.what()));
    }
  }
  if (rc.precision.recipe != "fp32" && !recipe_weights_in_store(rc) && pc.zero >= 3) {
    throw Error(fmt::format(
        "{}: precision.recipe = '{}' with {} keeps the fp32 master weights whole in the model, "
        "which parallel.zero = 3 does not hold on any rank; use {}",
        source, rc.precision.recipe, mc.moe.enabled() ? "MoE layers" : "diloco",
        mc.moe.enabled() ? "parallel.zero = 0 or 1 (MoE layers take no higher stage)"
                         : "parallel.zero <= 2, or recipe fp32"));
  }
  const std::string& grad_dtype = rc.precision.grad_dtype;
  if (grad_dtype != "fp32" && grad_dtype != "bf16") {
    throw Error(
        fmt::format("{}: precision.grad_dtype = '{}': expected fp32 or bf16", source, grad_dtype));
  }
  if (grad_dtype == "bf16") {
    std::string why;
    if (!recipe_weights_in_store(rc)) {
      why = rc.precision.recipe == "fp32" ? "recipe fp32 (set precision.recipe = \"bf16\")"
                                          : (mc.moe.enabled() ? "MoE layers" : "diloco");
    } else if (rc.optim.name != "adamw") {
      why = fmt::format("optim.name = '{}' (use adamw)", rc.optim.name);
    }
    if (!why.empty()) {
      throw Error(fmt::format(
          "{}: precision.grad_dtype = 'bf16' is not supported with {}; or use grad_dtype fp32",
          source, why));
    }
  }
  if (recipe_weights_in_store(rc) && gc.replica_check_every > 0) {
    throw Error(fmt::format(
        "{}: guard.replica_check_every compares the model's fp32 parameters, but precision.recipe "
        "= '{}' keeps them as a bf16 compute copy and an fp32 master among the optimizer state; "
        "set guard.replica_check_every = 0 or use recipe fp32",
        source, rc.precision.recipe));
  }
  if (rc.checkpoint.async && di.enabled()) {
    throw Error(fmt::format(
        "{}: checkpoint.async = true is not supported with [diloco] (its checkpoints gather the "
        "islands' state in one process); set checkpoint.async = false",
        source));
  }
  if (dc.vocab == 0) dc.vocab = mc.vocab_size;
  if (dc.vocab > mc.vocab_size) {
    throw Error(fmt::format("{}: data.vocab = {} exceeds model.vocab_size = {}", source, dc.vocab,
                            mc.vocab_size));
  }
  return rc;
}

bool recipe_weights_in_store(const RunConfig& c) {
  return c.precision.recipe != "fp32" && !c.model.moe.enabled() && !c.diloco.enabled();
}

StreamingConfig streaming_config(const DilocoConfig& d) {
  return {.inner_steps = static_cast<int>(d.inner_steps),
          .fragments = static_cast<int>(d.fragments),
          .overlap_steps = static_cast<int>(d.overlap_steps),
          .mixing = d.mixing,
          .pattern = d.fragment_pattern == "sequential" ? FragmentPattern::sequential
                                                        : FragmentPattern::strided};
}

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("cannot read config file '{}'", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_run_config(ss.str(), path, overrides);
}

std::string to_toml(const RunConfig& c) {
  const ModelConfig& m = c.model;
  toml::table model{{"vocab_size", m.vocab_size},
                    {"d_model", m.d_model},
                    {"n_layers", m.n_layers},
                    {"n_heads", m.n_heads},
                    {"n_kv_heads", m.n_kv_heads},
                    {"head_dim", m.head_dim},
                    {"ffn_hidden", m.ffn_hidden},
                    {"seq_len", m.seq_len},
                    {"tied_embeddings", m.tied_embeddings},
                    {"rope_theta", m.rope_theta},
                    {"norm_eps", m.norm_eps},
                    {"init_std", m.init_std},
                    {"dtype", std::string(dtype_name(m.dtype))},
                    {"recompute", m.recompute_string()},
                    {"attention", m.tiled_attention ? "tiled" : "materialized"},
                    {"attention_block", m.attention_block}};
  if (m.moe.enabled()) {  // written only for MoE models, so dense configs stay as they were
    model.insert("n_dense_layers", m.moe.n_dense_layers);
    model.insert("n_routed_experts", m.moe.n_routed_experts);
    model.insert("n_shared_experts", m.moe.n_shared_experts);
    model.insert("top_k", m.moe.top_k);
    model.insert("expert_ffn", m.moe.expert_ffn);
    model.insert("router", m.moe.router);
    model.insert("bias_update_rate", m.moe.bias_update_rate);
    model.insert("balance_loss_alpha", m.moe.balance_loss_alpha);
    model.insert("capacity_factor", m.moe.capacity_factor);
    model.insert("max_groups", m.moe.max_groups);
  }
  const TrainConfig& t = c.train;
  toml::table train{{"micro_batch", t.micro_batch},
                    {"grad_accum", t.grad_accum},
                    {"steps", t.steps},
                    {"seed", static_cast<int64_t>(t.seed)},
                    {"log_every", t.log_every},
                    {"eval_every", t.eval_every},
                    {"eval_batches", t.eval_batches},
                    {"noise_scale_decay", t.noise_scale_decay},
                    {"tensorboard", t.tensorboard}};
  const OptimConfig& o = c.optim;
  toml::table optim{{"name", o.name},
                    {"lr", o.lr},
                    {"min_lr", o.min_lr},
                    {"beta1", o.beta1},
                    {"beta2", o.beta2},
                    {"eps", o.eps},
                    {"weight_decay", o.weight_decay},
                    {"grad_clip", o.grad_clip},
                    {"schedule", o.schedule},
                    {"warmup_steps", o.warmup_steps},
                    {"decay_fraction", o.decay_fraction}};
  const DataConfig& d = c.data;
  toml::table data{{"source", d.source},
                   {"path", d.path},
                   {"order", d.order},
                   {"vocab", d.vocab},
                   {"seed", static_cast<int64_t>(d.seed)},
                   {"tokens", d.tokens},
                   {"val_tokens", d.val_tokens},
                   {"sharpness", d.sharpness}};
  const ParallelConfig& p = c.parallel;
  toml::table parallel{{"dp", p.dp},
                       {"tp", p.tp},
                       {"pp", p.pp},
                       {"cp", p.cp},
                       {"cp_split", p.cp_split},
                       {"ep", p.ep},
                       {"zero", p.zero},
                       {"bucket_mb", p.bucket_mb},
                       {"overlap", p.overlap},
                       {"schedule", p.schedule},
                       {"chunks", p.chunks},
                       {"split_backward", p.split_backward},
                       {"sp", p.sp},
                       {"allreduce", p.allreduce},
                       {"ranks_per_node", p.ranks_per_node}};
  const EmulateConfig& e = c.emulate;
  toml::table emulate{{"sites", e.sites}, {"latency_ms", e.latency_ms}, {"gbps", e.gbps}};
  const DilocoConfig& di = c.diloco;
  toml::table diloco{{"islands", di.islands},
                     {"inner_steps", di.inner_steps},
                     {"outer_lr", di.outer_lr},
                     {"outer_momentum", di.outer_momentum},
                     {"nesterov", di.nesterov},
                     {"fragments", di.fragments},
                     {"overlap_steps", di.overlap_steps},
                     {"mixing", di.mixing},
                     {"fragment_pattern", di.fragment_pattern},
                     {"outer_precision", di.outer_precision}};
  const GuardConfig& g = c.guard;
  toml::table guard{
      {"max_skips", g.max_skips},         {"spike_zscore", g.spike_zscore},
      {"spike_window", g.spike_window},   {"on_divergence", g.on_divergence},
      {"max_rollbacks", g.max_rollbacks}, {"replica_check_every", g.replica_check_every}};
  toml::table precision{{"recipe", c.precision.recipe}, {"grad_dtype", c.precision.grad_dtype}};
  // Written only when it differs from the recipe's, so --set precision.recipe=... on a resolved
  // config gets the new recipe's transform.
  if (c.precision.wgrad_hadamard != precision::kRecipeDefault &&
      c.precision.wgrad_hadamard != precision::recipe_named(c.precision.recipe).wgrad_hadamard) {
    precision.insert("wgrad_hadamard", c.precision.wgrad_hadamard);
  }
  if (!c.precision.bf16_blocks.empty() &&
      precision::resolve_bf16_blocks(precision::recipe_named(c.precision.recipe), c.model.n_layers,
                                     c.precision.bf16_blocks) !=
          precision::resolve_bf16_blocks(precision::recipe_named(c.precision.recipe),
                                         c.model.n_layers, "")) {
    precision.insert("bf16_blocks", c.precision.bf16_blocks);
  }
  toml::table checkpoint{{"interval", c.checkpoint.interval},
                         {"keep", c.checkpoint.keep},
                         {"async", c.checkpoint.async},
                         {"write_buffer_mb", c.checkpoint.write_buffer_mb}};
  toml::table root{
      {"model", model},         {"train", train},          {"optim", optim},   {"data", data},
      {"parallel", parallel},   {"emulate", emulate},      {"diloco", diloco}, {"guard", guard},
      {"precision", precision}, {"checkpoint", checkpoint}};
  std::stringstream ss;
  ss << root << "\n";
  return ss.str();
}

}  // namespace trillion
