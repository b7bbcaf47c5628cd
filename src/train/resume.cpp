// See resume.h.
#include "train/resume.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>

#include "train/checkpoint.h"

namespace trillion {

namespace {
// A full table-layout buffer, alive only while a checkpoint is read or written.
Buffer full_buffer(StepRunner& runner, MemoryTracker& tracker, DType dtype) {
  return Buffer(tracker, MemoryCategory::workspace, dtype, runner.global_elements());
}

// An optimizer without a moment (SGD) keeps an empty buffer: written as zeros, not read back.
void gather_moment(StepRunner& runner, Buffer& moment, const Buffer& global) {
  if (moment.count() > 0) runner.gather_global_state(moment, global);
}
void load_moment(StepRunner& runner, const Buffer& global, Buffer& moment) {
  if (moment.count() > 0) runner.load_global_state(global, moment);
}
}  // namespace

std::string save_checkpoint(RunDirectory& dir, StepRunner& runner, MemoryTracker& tracker,
                     const RunConfig& config, const std::string& config_toml, int64_t step,
                     uint64_t next_sample, const std::vector<CheckpointPart*>& parts) {
  const DType dt = config.model.dtype;
  Buffer params = full_buffer(runner, tracker, dt), m = full_buffer(runner, tracker, dt),
         v = full_buffer(runner, tracker, dt);
  runner.gather_global_parameters(params);
  gather_moment(runner, runner.optimizer().first_moment(), m);
  gather_moment(runner, runner.optimizer().second_moment(), v);
  std::vector<CheckpointFile> extra;
  for (CheckpointPart* part : parts) part->save(extra);
  if (!dir.lead()) return "";
  CheckpointContents c{
      &params,     &m,
      &v,          {step, runner.optimizer().steps_taken(), next_sample, config.train.seed},
      config_toml, std::move(extra)};
  const std::string where = write_checkpoint(dir.path(), c, config.train.keep_checkpoints);
  dir.event(fmt::format("checkpoint {} written", where));
  return where;
}

int64_t resume_from_checkpoint(RunDirectory& dir, StepRunner& runner, MemoryTracker& tracker,
                               const RunConfig& config, const std::vector<CheckpointPart*>& parts,
                               int64_t max_step) {
  std::vector<std::string> all = list_checkpoints(dir.path());
  // Zero-padded "step_N" names: the step is the number after the prefix.
  std::erase_if(all, [&](const std::string& ckpt) {
    const std::string name = std::filesystem::path(ckpt).filename().string();
    return std::strtoll(name.c_str() + 5, nullptr, 10) > max_step;
  });
  const DType dt = config.model.dtype;
  for (const std::string& ckpt : all) {
    if (auto problem = verify_checkpoint(ckpt)) {
      dir.event(
          fmt::format("checkpoint {} is corrupt ({}); trying the previous one", ckpt, *problem));
      continue;
    }
    Buffer params = full_buffer(runner, tracker, dt), m = full_buffer(runner, tracker, dt),
           v = full_buffer(runner, tracker, dt);
    const CheckpointState st = load_checkpoint(ckpt, params, &m, &v);
    runner.load_global_parameters(params);
    load_moment(runner, m, runner.optimizer().first_moment());
    load_moment(runner, v, runner.optimizer().second_moment());
    runner.optimizer().set_steps_taken(st.optimizer_steps);
    for (CheckpointPart* part : parts) part->load(ckpt);
    dir.event(fmt::format("resumed from {} at step {}", ckpt, st.step));
    return st.step;
  }
  if (!all.empty()) {
    throw Error(fmt::format(
        "no valid checkpoint in '{}/checkpoints' (all are corrupt; see events.log)", dir.path()));
  }
  dir.event("no checkpoint to resume from; starting at step 0");
  return 0;
}

}  // namespace trillion
