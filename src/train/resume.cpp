// See resume.h.
#include "train/resume.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "data/file_io.h"
#include "train/checkpoint.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

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
}  // namespace

namespace {
// Every rank's verdict on a phase: the failure message of the lowest failing rank's kind is
// local, so each rank says whether it failed and all learn whether anyone did.
bool anyone_failed(comm::Communicator& world, bool failed) {
  double flag = failed ? 1 : 0;
  world.all_reduce(Tensor(&flag, DType::f64, {1}), comm::ReduceOp::max);
  return flag > 0;
}

// Fault injection for the test of a disk that fills during a sharded write:
// TRILLION_DISK_FULL_AT_STEP=S:R makes rank R's shard write of step S fail as ENOSPC would,
// after its files are (partly) on disk.
bool disk_full_injected(int64_t step, int rank) {
  const char* spec = std::getenv("TRILLION_DISK_FULL_AT_STEP");
  long long s = 0;
  int r = -1;
  return spec != nullptr && std::sscanf(spec, "%lld:%d", &s, &r) == 2 && s == step && r == rank;
}

std::string save_sharded(RunDirectory& dir, StepRunner& runner, const RunConfig& config,
                         CheckpointContents& c, comm::Communicator& world) {
  const std::string tmp = fmt::format("{}/checkpoints/.tmp-step_{:08d}", dir.path(), c.state.step);
  std::string problem;
  // Every rank ends a failed phase with the same message: the lowest failing rank's, passed
  // through a file beside the run directory's checkpoints (the temporary may not exist).
  const std::string error_file =
      fmt::format("{}/checkpoints/.error-step_{:08d}", dir.path(), c.state.step);
  auto attempt = [&](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      problem = e.what();
    }
    double top = problem.empty() ? 0 : world.size() - world.rank();  // max: the lowest rank
    world.all_reduce(Tensor(&top, DType::f64, {1}), comm::ReduceOp::max);
    if (top == 0) return;
    const int lowest = world.size() - static_cast<int>(top);
    if (world.rank() == lowest) {
      std::ofstream(error_file, std::ios::trunc) << problem;
    }
    anyone_failed(world, true);  // a barrier: the message is on disk
    std::string message;
    try {
      message = data::read_file_raw(error_file);
    } catch (const Error&) {  // it could not be written: say which rank failed
    }
    anyone_failed(world, true);  // every rank has read it
    if (dir.lead()) {
      abandon_checkpoint(tmp);
      std::filesystem::remove(error_file);
    }
    if (message.empty()) {
      message = fmt::format("checkpoint of step {} not written: rank {} failed", c.state.step,
                            lowest);
    }
    throw Error(message);
  };
  attempt([&] {
    if (dir.lead()) TRILLION_CHECK(begin_sharded_checkpoint(dir.path(), c.state.step) == tmp, tmp);
  });
  const int bytes = static_cast<int>(dtype_size(config.model.dtype));
  attempt([&] {
    std::vector<ShardRun> runs;
    const Buffer& m = runner.optimizer().first_moment();
    const Buffer& v = runner.optimizer().second_moment();
    for (const StepRunner::OwnedRun& r : runner.owned_runs()) {
      auto at = [&](const Buffer& b, int64_t offset) -> const void* {
        return b.count() > 0 ? static_cast<const char*>(b.raw()) + offset * bytes : nullptr;
      };
      runs.push_back({r.global, r.length, at(*r.params, r.param_offset), at(m, r.state_offset),
                      at(v, r.state_offset)});
    }
    try {
      write_checkpoint_shard(tmp, world.rank(), runs, bytes);
      if (disk_full_injected(c.state.step, world.rank())) {
        throw Error(fmt::format("cannot write checkpoint file '{}/params_r{:05d}.bin': {}{}", tmp,
                                world.rank(), std::strerror(ENOSPC),
                                " (injected by TRILLION_DISK_FULL_AT_STEP)"));
      }
    } catch (const Error& e) {
      throw Error(fmt::format("checkpoint of step {} not written: {}", c.state.step, e.what()));
    }
  });
  std::string where;
  attempt([&] {
    if (!dir.lead()) return;
    ShardedLayout layout;
    layout.world = world.size();
    layout.elements = runner.global_elements();
    layout.dtype_bytes = bytes;
    layout.model_fingerprint = model_fingerprint(runner.global_table());
    const ParallelConfig& p = config.parallel;
    layout.writer = {{"dp", p.dp}, {"zero", p.zero}, {"tp", p.tp},
                     {"pp", p.pp}, {"cp", p.cp},     {"ep", p.ep}};
    where = commit_sharded_checkpoint(dir.path(), tmp, layout, c, config.train.keep_checkpoints);
  });
  return where;
}
}  // namespace

uint64_t model_fingerprint(const TensorTable& global_table) {
  std::string text;
  for (const TensorSpec& s : global_table.specs()) {
    text += s.name;
    for (int64_t d : s.global_shape) text += fmt::format(",{}", d);
    text += ';';
  }
  return XXH64(text.data(), text.size(), 0);
}

std::string save_checkpoint(RunDirectory& dir, StepRunner& runner, MemoryTracker& tracker,
                            const RunConfig& config, const std::string& config_toml, int64_t step,
                            uint64_t next_sample, const std::vector<CheckpointPart*>& parts,
                            comm::Communicator* world) {
  std::vector<CheckpointFile> extra;
  for (CheckpointPart* part : parts) part->save(extra);
  CheckpointState state{step, runner.optimizer().steps_taken(), next_sample, config.train.seed};
  if (world != nullptr && world->size() > 1 && !config.diloco.enabled()) {
    CheckpointContents c{nullptr, nullptr, nullptr, state, config_toml, std::move(extra)};
    const std::string where = save_sharded(dir, runner, config, c, *world);
    if (dir.lead()) dir.event(fmt::format("checkpoint {} written", where));
    return where;
  }
  const DType dt = config.model.dtype;
  Buffer params = full_buffer(runner, tracker, dt), m = full_buffer(runner, tracker, dt),
         v = full_buffer(runner, tracker, dt);
  runner.gather_global_parameters(params);
  gather_moment(runner, runner.optimizer().first_moment(), m);
  gather_moment(runner, runner.optimizer().second_moment(), v);
  if (!dir.lead()) return "";
  CheckpointContents c{&params, &m, &v, state, config_toml, std::move(extra)};
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
  const int bytes = static_cast<int>(dtype_size(config.model.dtype));
  for (const std::string& ckpt : all) {
    if (auto problem = verify_checkpoint(ckpt)) {
      dir.event(
          fmt::format("checkpoint {} is corrupt ({}); trying the previous one", ckpt, *problem));
      continue;
    }
    const CheckpointReader reader(ckpt);
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
    return reader.state().step;
  }
  if (!all.empty()) {
    throw Error(fmt::format(
        "no valid checkpoint in '{}/checkpoints' (all are corrupt; see events.log)", dir.path()));
  }
  dir.event("no checkpoint to resume from; starting at step 0");
  return 0;
}

}  // namespace trillion
