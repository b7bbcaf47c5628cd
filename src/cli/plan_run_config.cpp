// See plan_run_config.h.
#include "cli/plan_run_config.h"

#include <fmt/format.h>

#include <filesystem>

#include "core/error.h"
#include "data/file_io.h"
#include "plan/model_file.h"
#include "plan/units.h"
#include "train/step_layout.h"

namespace trillion::cli {

namespace {

bool names_a_file(const std::string& name) {
  return name.find('/') != std::string::npos || name.ends_with(".toml");
}

// Whether two readings of a config plan the same run.
bool same_plan_inputs(const RunConfigModel& a, const RunConfigModel& b) {
  return a.model == b.model && a.tokens == b.tokens;
}

std::string joined(const std::vector<std::string>& keys) {
  std::string out;
  for (const std::string& k : keys) out += (out.empty() ? "" : ", ") + k;
  return out.empty() ? "none" : out;
}

}  // namespace

RunConfigModel run_config_plan_inputs(const RunConfig& config, const std::string& name) {
  const ModelConfig& mc = config.model;
  RunConfigModel r;
  r.path = config.source;
  r.model = mc.spec();
  r.model.name = name;
  r.model.source = fmt::format("run config {}, read by the engine's parser", config.source);
  r.model.attention_kernel =
      mc.tiled_attention ? plan::AttentionKernel::kFlash : plan::AttentionKernel::kMaterialised;
  const double sequences =
      static_cast<double>(config.train.micro_batch) * static_cast<double>(config.train.grad_accum);
  r.model.default_batch_tokens = sequences * static_cast<double>(mc.seq_len);
  r.tokens = static_cast<double>(config.train.steps) * r.model.default_batch_tokens;
  return r;
}

bool is_run_config_text(const std::string& text, const std::string& source) {
  RunConfigKeys keys;
  try {
    keys = run_config_keys(text, source);
  } catch (const Error&) {
    return false;
  }
  for (const std::string& s : keys.sections)
    if (s != "model") return true;
  return false;
}

RunConfigModel read_run_config_model(const std::string& text, const std::string& path) {
  const std::string name = std::filesystem::path(path).stem().string();
  const RunConfig config = parse_run_config(text, path, {});
  RunConfigModel r = run_config_plan_inputs(config, name);
  // A key is used when leaving it out or changing it changes what is planned. A [model] key
  // whose every variant the engine refuses (e.g. one that other keys require) is taken as used;
  // in the other sections such a key (data.path of shards) is not the planner's. A [model] key
  // that has no other value to try (a string) and whose removal changes nothing in the resolved
  // config is at the engine's default: whether the plan reads it cannot be seen from this file.
  const std::string resolved = to_toml(config);
  for (const std::string& key : run_config_keys(text, path).keys) {
    const RunConfigVariants v = run_config_variants(text, path, key);
    auto differs = [&](const RunConfig& c) {
      return !same_plan_inputs(r, run_config_plan_inputs(c, name));
    };
    const bool model_key = key.starts_with("model.");
    bool used = v.without ? differs(*v.without) : model_key && v.changed.empty();
    for (const RunConfig& c : v.changed) used = used || differs(c);
    if (used)
      r.used.push_back(key);
    else if (model_key && v.changed.empty() && v.without && to_toml(*v.without) == resolved)
      r.at_default.push_back(key);
    else
      r.ignored.push_back(key);
  }
  return r;
}

plan::ModelSpec resolve_plan_model(const std::string& name,
                                   std::optional<RunConfigModel>* run_config) {
  if (!names_a_file(name)) return plan::resolve_model(name);
  std::string text;
  try {
    text = data::read_file_raw(name);
  } catch (const Error&) {
    return plan::resolve_model(name);  // its message names the file and where examples are
  }
  if (!is_run_config_text(text, name)) return plan::parse_model_toml(text, name);
  RunConfigModel r = read_run_config_model(text, name);
  r.text = std::move(text);
  const plan::ModelSpec m = r.model;
  if (run_config != nullptr) *run_config = std::move(r);
  return m;
}

void add_run_config_assumptions(plan::Plan& p, const RunConfigModel& r, bool batch_given,
                                bool tokens_given) {
  const double batch = r.model.default_batch_tokens;
  const double seq = static_cast<double>(r.model.default_seq);
  p.assumptions.emplace_back(
      "run config",
      fmt::format("{} read by the engine's run-config parser: the model is its [model] as the "
                  "engine allocates it (ModelConfig::spec()); batch train.micro_batch x "
                  "train.grad_accum = {:.0f} sequences of model.seq_len = {:.0f} ({} tokens){}; "
                  "tokens train.steps x batch = {}{}; keys used: {}",
                  r.path, batch / seq, seq, plan::format_count(batch),
                  batch_given ? ", replaced by --batch-tokens" : "", plan::format_count(r.tokens),
                  tokens_given ? ", replaced by --tokens" : "", joined(r.used)));
  p.assumptions.emplace_back(
      "ignored",
      fmt::format("{} (the plan is the same without them; the planner searches the layout, "
                  "--layout fixes it)",
                  joined(r.ignored)));
  if (!r.at_default.empty())
    p.assumptions.emplace_back(
        "at the engine's default",
        fmt::format("{} (the plan is the same without them; other values may change it)",
                    joined(r.at_default)));
}

std::string EngineLaunch::command(const std::string& path) const {
  std::string c = ranks > 1 ? fmt::format("trillion launch -n {} -- train {}", ranks, path)
                            : "trillion train " + path;
  for (const std::string& s : settings) c += " --set " + s;
  return c;
}

EngineLaunch engine_launch(const plan::Layout& l, const RunConfigModel& r, double sequences,
                           int64_t seq) {
  EngineLaunch e;
  e.ranks = static_cast<int>(l.gpus());
  auto set = [&](const std::string& key, const auto& value) {
    e.settings.push_back(fmt::format("{}={}", key, value));
  };
  if (l.tp > 1) set("parallel.tp", l.tp), set("parallel.sp", l.sp ? "true" : "false");
  if (l.pp > 1) {
    set("parallel.pp", l.pp);
    set("parallel.schedule", schedule::schedule_kind_name(l.schedule));
    if (l.schedule == schedule::ScheduleKind::kInterleaved) set("parallel.chunks", l.chunks);
    if (l.partition == plan::Partition::kExplicit) set("parallel.partition", l.partition_text());
  }
  if (l.cp > 1) set("parallel.cp", l.cp);
  if (l.ep > 1) set("parallel.ep", l.ep);
  if (l.dp > 1) set("parallel.dp", l.dp);
  if (l.dp * l.cp > 1) set("parallel.zero", l.zero);
  set("model.recompute", l.recompute_text());
  if (l.grad_bytes == 2) set("precision.grad_dtype", "bf16");
  if (seq != r.model.default_seq) set("model.seq_len", seq);
  const int64_t global_micro = int64_t{l.micro_batch} * l.dp;
  const auto whole = static_cast<int64_t>(sequences);
  set("train.micro_batch", global_micro);
  set("train.grad_accum", global_micro > 0 && whole % global_micro == 0 ? whole / global_micro : 0);
  // Layout fields the engine has no key for, at a value other than what the engine does.
  const std::vector<std::pair<bool, std::string>> unmapped = {
      {l.partition == plan::Partition::kBalanced,
       "partition=balanced (the engine takes even or explicit counts: partition=a/b/...)"},
      {l.allocation != plan::Allocation::kSlots, "alloc=live (the engine allocates slots)"},
      {l.moment_bytes != 4, "bf16 Adam moments (the engine keeps fp32 moments)"},
      {l.fp8_activations(), "act=fp8 (no FP8 activation cache)"},
      {l.ema != plan::Ema::kNone, "an EMA of the weights (the engine keeps none)"},
      {l.cp_all_gather, "cp_comm=allgather (the engine's cp is a ring)"},
      {l.blocking_p2p, "p2p=blocking (the engine's sends are asynchronous)"}};
  for (const auto& [differs, what] : unmapped)
    if (differs) {
      e.refusal = fmt::format("the engine has no {}", what);
      return e;
    }
  try {
    const RunConfig c = parse_run_config(r.text, r.path, e.settings);
    checked_layout(c);
    schedule_of(c);
  } catch (const Error& err) {
    e.refusal = err.what();
  }
  return e;
}

nlohmann::json run_config_json(const RunConfigModel& r) {
  return {{"path", r.path}, {"used", r.used}, {"ignored", r.ignored}, {"at_default", r.at_default}};
}

}  // namespace trillion::cli
