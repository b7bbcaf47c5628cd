// See resume.h.
#include "train/checkpoint/resume.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>

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

CheckpointState resume_from_checkpoint(RunDirectory& dir, StepRunner& runner,
                                       MemoryTracker& tracker, const RunConfig& config,
                                       const std::vector<CheckpointPart*>& parts,
                                       int64_t max_step) {
  std::vector<std::string> all = list_checkpoints(dir.path());
  // Zero-padded "step_N" names: the step is the number after the prefix.
  std::erase_if(all, [&](const std::string& ckpt) {
    const std::string name = std::filesystem::path(ckpt).filename().string();
    return std::strtoll(name.c_str() + 5, nullptr, 10) > max_step;
  });
  const int bytes = static_cast<int>(dtype_size(config.model.dtype));
  for (const std::string& ckpt : all) {
    if (auto problem = verify_checkpoint(ckpt)) {
      dir.event(
          fmt::format("checkpoint {} is corrupt ({}); trying the previous one", ckpt, *problem));
      continue;
    }
    const CheckpointReader reader(ckpt);
    const std::string name = std::filesystem::path(ckpt).filename().string();
    if (const long long named = std::strtoll(name.c_str() + 5, nullptr, 10);
        reader.state().step != named) {
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
  dir.event("no checkpoint to resume from; starting at step 0");
  return {};
}

}  // namespace trillion
