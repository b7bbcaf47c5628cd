// See run_config_sections.h. Each read_*_section reads its keys, rejects unknown ones, then checks
// its values in the order a user reads them; rules between sections are run_config_checks.cpp's.
// [model]'s reader is run_config_model_section.cpp; the key reader they share, section_reader.h.
#include "train/run_config_sections.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <set>

#include "comm/algorithms/algorithm_kind.h"
#include "core/error.h"
#include "model/sequence_split.h"
#include "optim/outer_nesterov.h"
#include "optim/outer_quantize.h"
#include "plan/context_ring.h"
#include "precision/recipe.h"
#include "schedule/action.h"
#include "train/section_reader.h"

namespace trillion {

namespace {

using namespace config_reading;

// The old names of checkpoint.interval and checkpoint.keep, given in [train] (kUnset: not given).
constexpr int64_t kUnset = std::numeric_limits<int64_t>::min();
struct OldCheckpointKeys {
  int64_t interval = kUnset;  // train.checkpoint_every
  int64_t keep = kUnset;      // train.keep_checkpoints
};

OldCheckpointKeys read_train_section(const toml::table& root, const std::string& source,
                                     TrainConfig& tc) {
  SectionReader t = section(root, "train", source);
  t.read("micro_batch", tc.micro_batch);
  t.read("grad_accum", tc.grad_accum);
  t.read("steps", tc.steps);
  t.read("seed", tc.seed);
  t.read("log_every", tc.log_every);
  t.read("eval_every", tc.eval_every);
  t.read("eval_batches", tc.eval_batches);
  OldCheckpointKeys old;  // merged by read_checkpoint_section
  t.read("checkpoint_every", old.interval);
  t.read("keep_checkpoints", old.keep);
  t.read("noise_scale_decay", tc.noise_scale_decay);
  t.read("tensorboard", tc.tensorboard);
  t.reject_unknown();
  at_least(source, "train.micro_batch", tc.micro_batch, 1);
  at_least(source, "train.grad_accum", tc.grad_accum, 1);
  at_least(source, "train.steps", tc.steps, 0);
  at_least(source, "train.log_every", tc.log_every, 1);
  at_least(source, "train.eval_every", tc.eval_every, 0);
  at_least(source, "train.eval_batches", tc.eval_batches, 1);
  if (!(tc.noise_scale_decay >= 0 && tc.noise_scale_decay < 1)) {
    throw Error(
        fmt::format("{}: train.noise_scale_decay = {} must be in [0, 1) (0.99 averages "
                    "over ~100 steps)",
                    source, tc.noise_scale_decay));
  }
  // Upper bounds keep every index the trainer forms from these (the global sample index
  // steps x grad_accum x micro_batch, tokens per step) inside int64.
  at_most(source, "train.micro_batch", tc.micro_batch, int64_t{1} << 20);
  at_most(source, "train.grad_accum", tc.grad_accum, int64_t{1} << 20);
  at_most(source, "train.eval_batches", tc.eval_batches, int64_t{1} << 20);
  at_most(source, "train.steps", tc.steps, int64_t{1} << 40);
  if (tc.steps > (int64_t{1} << 62) / (tc.micro_batch * tc.grad_accum)) {
    throw Error(
        fmt::format("{}: train.steps x grad_accum x micro_batch = {} x {} x {} exceeds "
                    "2^62 samples",
                    source, tc.steps, tc.grad_accum, tc.micro_batch));
  }
  return old;
}

void read_optim_section(const toml::table& root, const std::string& source, OptimConfig& oc) {
  SectionReader o = section(root, "optim", source);
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
  at_least(source, "optim.warmup_steps", oc.warmup_steps, 0);
  if (oc.schedule != "constant" && oc.schedule != "cosine" && oc.schedule != "wsd") {
    throw Error(fmt::format("{}: optim.schedule = '{}': expected constant, cosine or wsd", source,
                            oc.schedule));
  }
}

// data.sources = [{ path = "DIR", weight = W }, ...]: shards directories blended by weight.
void read_data_sources(const toml::node* node, const std::string& source, DataConfig& dc) {
  if (node == nullptr) return;
  const toml::array* list = node->as_array();
  const std::string usage =
      "data.sources must be an array of tables like "
      "[{ path = \"DIR\", weight = 0.7 }, { path = \"DIR2\", weight = 0.3 }]";
  if (list == nullptr || list->empty()) throw Error(fmt::format("{}: {}", source, usage));
  for (size_t i = 0; i < list->size(); ++i) {
    const toml::table* t = list->get(i)->as_table();
    if (t == nullptr) throw Error(fmt::format("{}: data.sources[{}]: {}", source, i, usage));
    DataSourceConfig sc;
    for (const auto& [key, value] : *t) {
      if (key.str() == "path" && value.is_string()) {
        sc.path = *value.value<std::string>();
      } else if (key.str() == "weight" && (value.is_floating_point() || value.is_integer())) {
        sc.weight = *value.value<double>();
      } else {
        throw Error(
            fmt::format("{}: data.sources[{}].{}: only path (a string) and weight (a "
                        "number) are known; {}",
                        source, i, key.str(), usage));
      }
    }
    if (sc.path.empty()) {
      throw Error(fmt::format("{}: data.sources[{}] needs a path; {}", source, i, usage));
    }
    if (!(sc.weight > 0) || !std::isfinite(sc.weight)) {
      throw Error(fmt::format("{}: data.sources[{}].weight = {} must be a number > 0", source, i,
                              sc.weight));
    }
    for (const char ch : sc.path) {
      if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) {
        throw Error(
            fmt::format("{}: data.sources[{}].path contains a control character", source, i));
      }
    }
    dc.sources.push_back(sc);
  }
}

// data.vocab = 0 (model.vocab_size) is resolved with the rules between sections.
void read_data_section(const toml::table& root, const std::string& source, DataConfig& dc) {
  SectionReader d = section(root, "data", source);
  d.read("source", dc.source);
  d.read("path", dc.path);
  d.read("order", dc.order);
  d.read("vocab", dc.vocab);
  d.read("seed", dc.seed);
  d.read("tokens", dc.tokens);
  d.read("val_tokens", dc.val_tokens);
  d.read("sharpness", dc.sharpness);
  d.read("document_mask", dc.document_mask);
  d.read("restart_positions", dc.restart_positions);
  d.read("mask_boundary_loss", dc.mask_boundary_loss);
  d.read("document_end_id", dc.document_end_id);
  d.read("on_exhausted", dc.on_exhausted);
  read_data_sources(d.node("sources"), source, dc);
  d.reject_unknown();
  if (dc.on_exhausted != "wrap" && dc.on_exhausted != "stop") {
    throw Error(
        fmt::format("{}: data.on_exhausted = '{}': expected wrap (a source that runs out "
                    "starts its next epoch) or stop (the run ends before it would)",
                    source, dc.on_exhausted));
  }
  if (dc.document_end_id < -1 || dc.document_end_id > std::numeric_limits<int32_t>::max()) {
    throw Error(
        fmt::format("{}: data.document_end_id = {} must be a token id (or -1: the shards' "
                    "own)",
                    source, dc.document_end_id));
  }
  if (dc.restart_positions && !dc.document_mask) {
    throw Error(
        fmt::format("{}: data.restart_positions = true needs data.document_mask = true "
                    "(positions restart per document only when attention does)",
                    source));
  }
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
  at_least(source, "data.tokens", dc.tokens, 1);
  at_least(source, "data.val_tokens", dc.val_tokens, 0);
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
  if (!dc.sources.empty() && (dc.source != "shards" || !dc.path.empty())) {
    throw Error(
        fmt::format("{}: data.sources blends shards directories: set data.source = "
                    "'shards' and leave data.path out (each source has its own path)",
                    source));
  }
  if (dc.source == "shards" && dc.path.empty() && dc.sources.empty()) {
    throw Error(
        fmt::format("{}: data.source = 'shards' needs data.path (the output of 'trillion "
                    "data prepare')",
                    source));
  }
}

void read_parallel_section(const toml::table& root, const std::string& source, ParallelConfig& pc) {
  SectionReader p = section(root, "parallel", source);
  p.read("dp", pc.dp);
  p.read("tp", pc.tp);
  p.read("pp", pc.pp);
  p.read("cp", pc.cp);
  p.read("cp_split", pc.cp_split);
  p.read("cp_mla", pc.cp_mla);
  p.read("ep", pc.ep);
  p.read("zero", pc.zero);
  p.read("bucket_mb", pc.bucket_mb);
  p.read("overlap", pc.overlap);
  p.read("schedule", pc.schedule);
  p.read("chunks", pc.chunks);
  p.read("partition", pc.partition);
  p.read("split_backward", pc.split_backward);
  p.read("sp", pc.sp);
  p.read("expert_tp", pc.expert_tp);
  p.read("allreduce", pc.allreduce);
  p.read("ranks_per_node", pc.ranks_per_node);
  p.reject_unknown();
  at_least(source, "parallel.dp", pc.dp, 1);
  at_least(source, "parallel.tp", pc.tp, 1);
  at_least(source, "parallel.pp", pc.pp, 1);
  at_least(source, "parallel.cp", pc.cp, 1);
  at_least(source, "parallel.ep", pc.ep, 1);
  at_least(source, "parallel.expert_tp", pc.expert_tp, 1);
  at_least(source, "parallel.chunks", pc.chunks, 1);
  naming_source(source, "", [&] { parse_cp_split(pc.cp_split, "parallel.cp_split"); });
  naming_source(source, "", [&] { plan::parse_cp_mla(pc.cp_mla, "parallel.cp_mla"); });
  naming_source(source, "", [&] { pc.stage_layers(); });
  naming_source(source, "parallel.schedule: ", [&] { schedule::parse_schedule_kind(pc.schedule); });
  if (pc.zero < 0 || pc.zero > 3) {
    throw Error(
        fmt::format("{}: parallel.zero = {}: expected a ZeRO stage 0, 1, 2 or 3", source, pc.zero));
  }
  if (!(pc.bucket_mb > 0) || !std::isfinite(pc.bucket_mb)) {
    throw Error(fmt::format("{}: parallel.bucket_mb = {} must be > 0 (25 is a good default)",
                            source, pc.bucket_mb));
  }
  naming_source(source, "", [&] { comm::parse_algorithm(pc.allreduce, "parallel.allreduce"); });
  at_least(source, "parallel.ranks_per_node", pc.ranks_per_node, 0);
}

void read_emulate_section(const toml::table& root, const std::string& source, EmulateConfig& ec) {
  SectionReader em = section(root, "emulate", source);
  em.read("sites", ec.sites);
  em.read("latency_ms", ec.latency_ms);
  em.read("gbps", ec.gbps);
  em.reject_unknown();
  at_least(source, "emulate.sites", ec.sites, 1);
  if (!(ec.latency_ms >= 0) || !(ec.gbps >= 0)) {
    throw Error(fmt::format(
        "{}: emulate.latency_ms = {} and emulate.gbps = {} must be >= 0 (gbps 0: no limit)", source,
        ec.latency_ms, ec.gbps));
  }
}

void read_guard_section(const toml::table& root, const std::string& source, GuardConfig& gc) {
  SectionReader gd = section(root, "guard", source);
  gd.read("max_skips", gc.max_skips);
  gd.read("spike_zscore", gc.spike_zscore);
  gd.read("spike_window", gc.spike_window);
  gd.read("on_divergence", gc.on_divergence);
  gd.read("max_rollbacks", gc.max_rollbacks);
  gd.read("replica_check_every", gc.replica_check_every);
  gd.reject_unknown();
  at_least(source, "guard.max_skips", gc.max_skips, 1);
  at_least(source, "guard.spike_window", gc.spike_window, 2);
  at_least(source, "guard.max_rollbacks", gc.max_rollbacks, 0);
  at_least(source, "guard.replica_check_every", gc.replica_check_every, 0);
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

void read_checkpoint_section(const toml::table& root, const std::string& source,
                             const OldCheckpointKeys& old, CheckpointConfig& cc) {
  SectionReader ck = section(root, "checkpoint", source);
  ck.read("async", cc.async);
  ck.read("write_buffer_mb", cc.write_buffer_mb);
  int64_t interval = kUnset, keep = kUnset;
  ck.read("interval", interval);
  ck.read("keep", keep);
  ck.reject_unknown();
  cc.interval = one_of_two_names(source, "checkpoint.interval", interval, "train.checkpoint_every",
                                 old.interval, cc.interval);
  cc.keep = one_of_two_names(source, "checkpoint.keep", keep, "train.keep_checkpoints", old.keep,
                             cc.keep);
  // A bad value is named by the key it was given under.
  at_least(source,
           interval == kUnset && old.interval != kUnset ? "train.checkpoint_every"
                                                        : "checkpoint.interval",
           cc.interval, 0);
  at_least(source,
           keep == kUnset && old.keep != kUnset ? "train.keep_checkpoints" : "checkpoint.keep",
           cc.keep, 1);
  // 4 KiB: a page; below it the buffer costs more system calls than it saves memory.
  if (!(cc.write_buffer_mb >= 1.0 / 256) || !(cc.write_buffer_mb <= 65536)) {
    throw Error(
        fmt::format("{}: checkpoint.write_buffer_mb = {} must be between 0.00390625 (4 "
                    "KiB) and 65536; 64 is the default",
                    source, cc.write_buffer_mb));
  }
}

// precision.bf16_blocks is checked against model.n_layers with the rules between sections.
void read_precision_section(const toml::table& root, const std::string& source,
                            PrecisionConfig& pc) {
  SectionReader pr = section(root, "precision", source);
  pr.read("recipe", pc.recipe);
  pr.read("grad_dtype", pc.grad_dtype);
  pc.wgrad_hadamard = precision::kRecipeDefault;
  pr.read("wgrad_hadamard", pc.wgrad_hadamard);
  pr.read("bf16_blocks", pc.bf16_blocks);
  pr.read("head", pc.head);
  pr.reject_unknown();
  naming_source(source, "precision.recipe: ", [&] { precision::recipe_named(pc.recipe); });
  naming_source(source, "precision.", [&] {
    pc.wgrad_hadamard = precision::recipe_with(pc.recipe, pc.wgrad_hadamard).wgrad_hadamard;
  });
  if (pc.grad_dtype != "fp32" && pc.grad_dtype != "bf16") {
    throw Error(fmt::format("{}: precision.grad_dtype = '{}': expected fp32 or bf16", source,
                            pc.grad_dtype));
  }
  if (pc.head != "fp32" && pc.head != "bf16") {
    throw Error(fmt::format("{}: precision.head = '{}': expected fp32 or bf16", source, pc.head));
  }
  if (pc.head == "bf16" && pc.recipe == "fp32") {
    throw Error(
        fmt::format("{}: precision.head = 'bf16' needs a precision recipe (bf16, fp8, "
                    "mxfp4 or nvfp4); recipe fp32 keeps every GEMM in fp32",
                    source));
  }
}

// The rules that relate [diloco] to the layout and the model are run_config_checks.cpp's.
void read_diloco_section(const toml::table& root, const std::string& source, DilocoConfig& di) {
  SectionReader dl = section(root, "diloco", source);
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
  at_least(source, "diloco.islands", di.islands, 0);
  if (!di.enabled()) return;
  naming_source(source, "", [&] {
    OuterNesterov(0, {di.outer_lr, di.outer_momentum, di.nesterov});  // checks lr, momentum
    parse_outer_precision(di.outer_precision, "diloco.outer_precision");
    if (di.fragment_pattern != "strided" && di.fragment_pattern != "sequential") {
      throw Error(fmt::format("diloco.fragment_pattern = '{}': expected strided or sequential",
                              di.fragment_pattern));
    }
  });
}

}  // namespace

void read_sections(const toml::table& root, const std::string& source, RunConfig& rc) {
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
  read_model_section(root, source, rc.model);
  const OldCheckpointKeys old = read_train_section(root, source, rc.train);
  read_optim_section(root, source, rc.optim);
  read_data_section(root, source, rc.data);
  read_parallel_section(root, source, rc.parallel);
  read_emulate_section(root, source, rc.emulate);
  read_guard_section(root, source, rc.guard);
  read_checkpoint_section(root, source, old, rc.checkpoint);
  read_precision_section(root, source, rc.precision);
  read_diloco_section(root, source, rc.diloco);
}

}  // namespace trillion
