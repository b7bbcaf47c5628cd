// `trillion plan --model RUN_CONFIG.toml`: planning the run an engine config describes. The file is
// read by the engine's own parser (train/run_config.h), so every key the engine accepts is
// accepted here and no second key list has to follow the engine's; the model is
// ModelConfig::spec(), whose parameter table is the one the engine allocates. This bridge lives
// in cli/ because plan/ must not depend on train/ (DESIGN.md: train may use plan, never the
// other way round).
//
// Which reader --model uses: a catalog name -> the catalog; a file with any [table] besides
// [model] ([train], [optim], [data], [parallel], ...) -> this reader; a file with only [model] ->
// the planner's model-file reader (plan/model_file.h), as before.
//
// What a run config gives the planner: the model (with model.attention's kernel), the batch
// (train.micro_batch x train.grad_accum sequences of model.seq_len per optimizer step; the
// micro-batch is global in the engine) and the training tokens (train.steps x that batch);
// --batch-tokens, --seq and --tokens replace them. A key counts as used when the config read
// without it, or with another value of its type (run_config_variants), plans differently; the
// others are ignored and named so, except [model] strings at the engine's default (router =
// "sigmoid_bias"), which no variant can test: those are named "at the engine's default". The layout
// keys ([parallel], model.recompute, [precision], train.micro_batch's split) are among the ignored
// ones: the planner searches the layout
// (--layout fixes it).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "plan/model_spec.h"
#include "plan/plan.h"
#include "train/run_config.h"

namespace trillion::cli {

struct RunConfigModel {
  std::string path;
  std::string text;       // the file, for the engine's reading of a layout (engine_launch)
  plan::ModelSpec model;  // default_batch_tokens: the run's batch
  double tokens = 0;      // train.steps x the batch
  // "section.key", in name order: keys that change the plan; keys that do not (left out or
  // changed); [model] strings set to the engine's default, which only other values would test.
  std::vector<std::string> used, ignored, at_default;
};

// The planner's inputs from a parsed run config; `name` names the model.
RunConfigModel run_config_plan_inputs(const RunConfig& config, const std::string& name);

// Whether TOML text is a run config: it has a [table] besides [model]. Text that does not parse
// is not (the model-file reader then names the error).
bool is_run_config_text(const std::string& text, const std::string& source);

// Reads a run config for planning, sorting its keys into used and ignored.
RunConfigModel read_run_config_model(const std::string& text, const std::string& path);

// --model's value: a catalog name, a planner model file or a run config (then *run_config is
// set, when given).
plan::ModelSpec resolve_plan_model(const std::string& name_or_path,
                                   std::optional<RunConfigModel>* run_config = nullptr);

// The plan's assumptions about the run config: where the model, batch and tokens came from and
// which keys were ignored (--batch-tokens / --tokens given: those replace the run's).
void add_run_config_assumptions(plan::Plan& p, const RunConfigModel& r, bool batch_given,
                                bool tokens_given);
// How the engine trains a planned layout of this run config: `trillion launch -n ranks -- train
// PATH --set k=v ...`. The settings are the layout's engine keys: parallel.tp/sp, pp/schedule/
// chunks, cp, ep, dp/zero, model.recompute, precision.grad_dtype, and the split of the planned
// batch (`sequences` of `seq` tokens) into train.micro_batch = micro_batch x dp sequences (the
// engine's micro-batch is global) and train.grad_accum; model.seq_len when --seq changed it. The
// run's own [precision] recipe is kept (the plan's precision is printed apart, on its Engine
// line). `refusal` is empty when the engine's own checks accept the layout (the run-config
// reader, train/step_layout.h's checked_layout and schedule_of), else why not: a layout field
// with no engine key (partition=balanced, alloc=live, bf16 moments, act=fp8, an EMA,
// cp_comm=allgather, blocking sends) or the engine's message.
struct EngineLaunch {
  int ranks = 1;
  std::vector<std::string> settings;  // "key=value", in the order above
  std::string refusal;
  std::string command(const std::string& path) const;  // the trillion command line
};
EngineLaunch engine_launch(const plan::Layout& l, const RunConfigModel& r, double sequences,
                           int64_t seq);

// --json's "run_config": {"path", "used": [...], "ignored": [...], "at_default": [...]}.
nlohmann::json run_config_json(const RunConfigModel& r);

}  // namespace trillion::cli
