// See resume.h.
#include "train/checkpoint/resume.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "data/file_io.h"
#include "train/checkpoint/checkpoint.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace trillion {

uint64_t model_fingerprint(const TensorTable& global_table) {
  std::string text;
  for (const TensorSpec& s : global_table.specs()) {
    text += s.name;
    for (int64_t d : s.global_shape) text += fmt::format(",{}", d);
    text += ';';
  }
  return XXH64(text.data(), text.size(), 0);
}

namespace {

// The newest valid checkpoint of a step <= max_step, loaded; nullopt when the run has none.
std::optional<CheckpointState> load_newest(RunDirectory& dir, StepRunner& runner,
                                           const RunConfig& config,
                                           const std::vector<CheckpointPart*>& parts,
                                           int64_t max_step) {
  std::vector<std::string> all = list_checkpoints(dir.path());
  std::erase_if(all, [&](const std::string& ckpt) {
    return *checkpoint_step_of(std::filesystem::path(ckpt).filename().string()) > max_step;
  });
  const int bytes = static_cast<int>(dtype_size(config.model.dtype));
  for (const std::string& ckpt : all) {
    if (auto problem = verify_checkpoint(ckpt)) {
      dir.event(
          fmt::format("checkpoint {} is corrupt ({}); trying the previous one", ckpt, *problem));
      continue;
    }
    const CheckpointReader reader(ckpt);
    const int64_t named = *checkpoint_step_of(std::filesystem::path(ckpt).filename().string());
    if (reader.state().step != named) {
      dir.event(fmt::format(
          "checkpoint {} is corrupt (its state.json says step {}, its name step {}); trying the "
          "previous one",
          ckpt, reader.state().step, named));
      continue;
    }
    const std::optional<uint64_t> fingerprint = reader.model_fingerprint();
    if (reader.elements() != runner.global_elements() || reader.dtype_bytes() != bytes ||
        (fingerprint && *fingerprint != model_fingerprint(runner.global_table()))) {
      throw Error(fmt::format(
          "checkpoint '{}' holds {} parameters of {} bytes{} but this model has {} of {}: it is "
          "a checkpoint of a different model config (resume it with the config it was written "
          "with, or start a new run directory)",
          ckpt, reader.elements(), reader.dtype_bytes(),
          fingerprint && *fingerprint != model_fingerprint(runner.global_table())
              ? " in other tensors"
              : "",
          runner.global_elements(), bytes));
    }
    using Part = CheckpointReader::Part;
    auto from = [&](Part part) {
      return [&reader, part](int64_t global, const Tensor& to) {
        reader.read(part, global, to.numel(), to.raw());
      };
    };
    runner.load_parameters_from(from(Part::params));
    Buffer& m = runner.optimizer().first_moment();
    Buffer& v = runner.optimizer().second_moment();
    if (m.count() > 0) runner.load_state_from(from(Part::first_moment), m);
    if (v.count() > 0) runner.load_state_from(from(Part::second_moment), v);
    runner.optimizer().set_steps_taken(reader.state().optimizer_steps);
    for (CheckpointPart* part : parts) part->load(ckpt);
    dir.event(fmt::format("resumed from {} at step {}", ckpt, reader.state().step));
    CheckpointState state = reader.state();
    state.loaded = true;
    return state;
  }
  if (!all.empty()) {
    throw Error(fmt::format(
        "no valid checkpoint in '{}/checkpoints' (all are corrupt; see events.log)", dir.path()));
  }
  return std::nullopt;
}

// The last step metrics.jsonl logs, 0 when it logs none (or does not exist).
int64_t last_logged_step(const std::string& path) {
  int64_t step = 0;
  data::visit_lines_backwards(path, [&](std::string_view line, uint64_t, bool) {
    try {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (j.is_object() && j.contains("step") && j["step"].is_number_integer()) {
        step = j["step"].get<int64_t>();
        return false;
      }
    } catch (const nlohmann::json::exception&) {
      // a torn last line of a killed run, or a blank one
    }
    return true;
  });
  return step;
}

// What checkpoints/ holds when no checkpoint is there, for the refusal.
std::string describe_checkpoint_dir(const std::string& run_dir) {
  const std::filesystem::path root = std::filesystem::path(run_dir) / "checkpoints";
  std::error_code ec;
  if (!std::filesystem::exists(root, ec)) return "checkpoints/ is missing";
  if (!std::filesystem::is_directory(root, ec)) return "checkpoints is not a directory";
  if (std::filesystem::is_empty(root, ec)) return "checkpoints/ is empty";
  return "checkpoints/ holds no step_NNNNNNNN directory";
}

}  // namespace

CheckpointState resume_from_checkpoint(RunDirectory& dir, StepRunner& runner,
                                       MemoryTracker& tracker, const RunConfig& config,
                                       const std::vector<CheckpointPart*>& parts,
                                       int64_t max_step) {
  (void)tracker;
  if (auto state = load_newest(dir, runner, config, parts, max_step)) return *state;
  dir.event("no checkpoint to resume from; starting at step 0");
  return {};
}

CheckpointState resume_run(RunDirectory& dir, StepRunner& runner, MemoryTracker& tracker,
                           const RunConfig& config, const std::vector<CheckpointPart*>& parts) {
  (void)tracker;
  if (auto state = load_newest(dir, runner, config, parts, INT64_MAX)) return *state;
  const int64_t logged = last_logged_step(dir.path() + "/metrics.jsonl");
  const char* supervised = std::getenv("TRILLION_SUPERVISED_RESTART");
  const bool restart = supervised != nullptr && std::string_view(supervised) == "1";
  if (logged > 0 && !restart) {
    throw Error(fmt::format(
        "run directory '{}' has no checkpoint to resume ({}) but its metrics.jsonl logs steps "
        "up to {}: --resume would start at step 0 and cut those lines. To start over, choose a "
        "new --run-dir (or move this one's metrics.jsonl away); nothing was changed",
        dir.path(), describe_checkpoint_dir(dir.path()), logged));
  }
  dir.event(logged > 0 ? fmt::format("no checkpoint to resume from; starting at step 0 (a "
                                     "supervised restart before the first checkpoint: steps "
                                     "1..{} are trained again)",
                                     logged)
                       : std::string("no checkpoint to resume from; starting at step 0"));
  return {};
}

}  // namespace trillion
