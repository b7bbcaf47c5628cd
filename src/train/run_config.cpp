// See run_config.h. Reading a config is: the TOML text, the --set overrides applied to it, one
// reader per section (run_config_sections.h), then the rules between sections
// (run_config_checks.h). toml++ is heavy to compile: this file and run_config_sections.cpp are
// the only translation units that include it.
#include "train/run_config.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <cmath>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/toml_depth.h"
#include "data/file_io.h"
#include "optim/streaming_schedule.h"
#include "plan/stage_partition.h"
#include "precision/recipe.h"
#include "train/run_config_checks.h"
#include "train/run_config_sections.h"
#include "train/toml_subset.h"

namespace trillion {

namespace {

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

// [model]; the MoE keys only for MoE models.
toml::table model_table(const ModelConfig& m) {
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
                    {"attention", m.mla ? "mla" : "gqa"},
                    {"attention_kernel", m.tiled_attention ? "tiled" : "materialized"},
                    {"attention_block", m.attention_block}};
  if (m.mla) {  // written only for MLA models
    model.insert("q_lora_rank", m.mla_dims.q_lora_rank);
    model.insert("kv_lora_rank", m.mla_dims.kv_lora_rank);
    model.insert("qk_nope_head_dim", m.mla_dims.qk_nope_head_dim);
    model.insert("qk_rope_head_dim", m.mla_dims.qk_rope_head_dim);
    model.insert("v_head_dim", m.mla_dims.v_head_dim);
  }
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
    model.insert("n_group", m.moe.n_group);
    model.insert("topk_group", m.moe.topk_group);
  }
  if (m.mtp.enabled()) {  // likewise only with multi-token prediction
    model.insert("mtp_depth", m.mtp.depth);
    model.insert("mtp_loss_weight", m.mtp.loss_weight);
    if (m.mtp.loss_weight_after >= 0) {
      model.insert("mtp_loss_weight_after", m.mtp.loss_weight_after);
      model.insert("mtp_loss_weight_switch_step", m.mtp.switch_step);
    }
  }
  return model;
}

// [precision]; wgrad_hadamard and bf16_blocks only where they differ from the recipe's own.
toml::table precision_table(const PrecisionConfig& p, int64_t n_layers) {
  toml::table precision{{"recipe", p.recipe}, {"grad_dtype", p.grad_dtype}};
  // Written only when it differs from the recipe's, so --set precision.recipe=... on a resolved
  // config gets the new recipe's transform.
  if (p.wgrad_hadamard != precision::kRecipeDefault &&
      p.wgrad_hadamard != precision::recipe_named(p.recipe).wgrad_hadamard) {
    precision.insert("wgrad_hadamard", p.wgrad_hadamard);
  }
  if (!p.bf16_blocks.empty() &&
      precision::resolve_bf16_blocks(precision::recipe_named(p.recipe), n_layers, p.bf16_blocks) !=
          precision::resolve_bf16_blocks(precision::recipe_named(p.recipe), n_layers, "")) {
    precision.insert("bf16_blocks", p.bf16_blocks);
  }
  if (p.head != "fp32") precision.insert("head", p.head);
  return precision;
}

}  // namespace

namespace {

toml::table parse_text(const std::string& text, const std::string& source) {
  check_toml_subset(text, source);
  check_toml_key_depth(text, source);
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw Error(fmt::format("{}:{}:{}: {}", source, e.source().begin.line, e.source().begin.column,
                            e.description()));
  }
}

// A parsed config (its overrides applied) read section by section, then checked across them.
RunConfig from_root(const toml::table& root, const std::string& source) {
  if (!root.contains("model")) {
    // Every default of [model] is a size of 0, so the first check would blame one key of it.
    throw Error(fmt::format(
        "{}: {}; a run config names at least its model ([model]: vocab_size, d_model, n_layers, "
        "n_heads, seq_len); start from configs/tiny.toml",
        source, root.empty() ? "the file is empty (no settings)" : "it has no [model] table"));
  }
  RunConfig rc;
  rc.source = source;
  read_sections(root, source, rc);
  check_across_sections(rc, source);
  resolve_across_sections(rc);
  return rc;
}

}  // namespace

RunConfig parse_run_config(const std::string& text, const std::string& source,
                           const std::vector<std::string>& overrides) {
  toml::table root = parse_text(text, source);
  std::set<std::string> set_keys;
  for (const std::string& o : overrides) {
    apply_override(root, o, source);
    drop_other_name(root, o, set_keys);
  }
  return from_root(root, source);
}

RunConfigKeys run_config_keys(const std::string& text, const std::string& source) {
  const toml::table root = parse_text(text, source);
  RunConfigKeys out;
  for (const auto& [name, node] : root) {
    const toml::table* table = node.as_table();
    if (table == nullptr) continue;
    const std::string section(name.str());
    out.sections.push_back(section);
    for (const auto& [key, value] : *table)
      out.keys.push_back(section + "." + std::string(key.str()));
  }
  return out;
}

RunConfigVariants run_config_variants(const std::string& text, const std::string& source,
                                      const std::string& key) {
  const toml::table root = parse_text(text, source);
  const size_t dot = key.find('.');
  if (dot == std::string::npos) return {};
  const std::string section = key.substr(0, dot), name = key.substr(dot + 1);
  const toml::table* table = root[section].as_table();
  const toml::node* node = table == nullptr ? nullptr : table->get(name);
  if (node == nullptr) return {};
  std::vector<toml::table> roots;
  roots.push_back(root);
  roots.back()[section].as_table()->erase(name);
  auto with = [&](auto value) {
    roots.push_back(root);
    roots.back()[section].as_table()->insert_or_assign(name, value);
  };
  constexpr int64_t kLarge = int64_t{1} << 40;  // +1 and x2 stay far from overflow
  if (const auto b = node->value_exact<bool>()) {
    with(!*b);
  } else if (node->is_integer()) {
    const int64_t v = *node->value<int64_t>();
    if (v > -kLarge && v < kLarge) {
      with(v + 1);
      with(v == 0 ? int64_t{1} : 2 * v);
    }
  } else if (node->is_floating_point()) {
    const double v = *node->value<double>();
    if (std::isfinite(v)) with(v == 0 ? 1.0 : 2 * v);
  }
  RunConfigVariants out;
  for (size_t i = 0; i < roots.size(); ++i) {
    try {
      RunConfig config = from_root(roots[i], source);
      if (i == 0)
        out.without = std::move(config);
      else
        out.changed.push_back(std::move(config));
    } catch (const std::exception&) {  // a variant the engine refuses says nothing
    }
  }
  return out;
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
  std::string text;
  try {
    text = data::read_file_raw(path);  // refuses a FIFO or device rather than blocking on it
  } catch (const Error& e) {
    throw Error(fmt::format("config file: {}", e.what()));
  }
  return parse_run_config(text, path, overrides);
}

std::vector<int> ParallelConfig::stage_layers() const {
  if (partition == "even") return {};
  std::vector<int> counts;
  if (!plan::parse_stage_layer_counts(partition, &counts))
    throw Error(
        fmt::format("parallel.partition = \"{}\": use \"even\" or the layers of each "
                    "pipeline stage in stage order, separated by '/' (e.g. \"1/3\")",
                    partition));
  return counts;
}

std::string to_toml(const RunConfig& c) {
  const toml::table model = model_table(c.model);
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
                   {"sharpness", d.sharpness},
                   {"document_mask", d.document_mask},
                   {"restart_positions", d.restart_positions},
                   {"mask_boundary_loss", d.mask_boundary_loss},
                   {"document_end_id", d.document_end_id},
                   {"on_exhausted", d.on_exhausted}};
  if (!d.sources.empty()) {
    toml::array sources;
    for (const DataSourceConfig& sc : d.sources) {
      sources.push_back(toml::table{{"path", sc.path}, {"weight", sc.weight}});
    }
    data.insert("sources", sources);
  }
  const ParallelConfig& p = c.parallel;
  toml::table parallel{{"dp", p.dp},
                       {"tp", p.tp},
                       {"pp", p.pp},
                       {"cp", p.cp},
                       {"cp_split", p.cp_split},
                       {"cp_mla", p.cp_mla},
                       {"ep", p.ep},
                       {"zero", p.zero},
                       {"bucket_mb", p.bucket_mb},
                       {"overlap", p.overlap},
                       {"schedule", p.schedule},
                       {"chunks", p.chunks},
                       {"partition", p.partition},
                       {"split_backward", p.split_backward},
                       {"sp", p.sp},
                       {"expert_tp", p.expert_tp},
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
  const toml::table precision = precision_table(c.precision, c.model.n_layers);
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
