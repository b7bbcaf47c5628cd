// See writer.h.
#include "train/checkpoint/writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "core/timer.h"
#include "train/memory_check.h"

namespace trillion {

namespace {

// Fault injection for the tests of a disk that fills during a write:
// TRILLION_DISK_FULL_AT_STEP=S:R makes rank R's write of step S fail as ENOSPC would, after its
// files are (partly) on disk.
void inject_disk_full(int64_t step, int rank, const std::string& tmp) {
  const char* spec = std::getenv("TRILLION_DISK_FULL_AT_STEP");
  long long s = 0;
  int r = -1;
  if (spec != nullptr && std::sscanf(spec, "%lld:%d", &s, &r) == 2 && s == step && r == rank) {
    throw Error(fmt::format("cannot write checkpoint file '{}/params_r{:05d}.bin': {}{}", tmp, rank,
                            std::strerror(ENOSPC), " (injected by TRILLION_DISK_FULL_AT_STEP)"));
  }
}

std::string temp_path(const std::string& run_dir, int64_t step) {
  return fmt::format("{}/checkpoints/.tmp-step_{:08d}", run_dir, step);
}

}  // namespace

// One async checkpoint between its snapshot and its commit.
struct CheckpointWriter::Pending {
  int64_t step = 0;
  std::string tmp;
  bool full = false;  // the one-process form
  CheckpointContents contents;
  Buffer snapshot;  // the rank's owned parameters, then first, then second moments
  std::thread thread;
  std::atomic<bool> done{false};
  std::string problem;  // set by the thread before `done`
  double seconds = 0;   // the thread's
};

CheckpointWriter::CheckpointWriter(RunDirectory& dir, StepRunner& runner, MemoryTracker& tracker,
                                   const RunConfig& config, const std::string& config_toml,
                                   comm::Communicator& world,
                                   std::function<void(int64_t, const std::string&)> on_commit)
    : dir_(dir),
      runner_(runner),
      tracker_(tracker),
      config_(config),
      config_toml_(config_toml),
      world_(world),
      on_commit_(std::move(on_commit)),
      dtype_bytes_(static_cast<int>(dtype_size(config.model.dtype))) {}

CheckpointWriter::~CheckpointWriter() {
  if (pending_ && pending_->thread.joinable()) pending_->thread.join();
}

void CheckpointWriter::agree_on(int64_t step, const std::string& tmp, std::string problem) {
  double top = problem.empty() ? 0 : world_.size() - world_.rank();  // max: the lowest rank
  world_.all_reduce(Tensor(&top, DType::f64, {1}), comm::ReduceOp::max);
  if (top == 0) return;
  const int lowest = world_.size() - static_cast<int>(top);
  // The lowest failing rank's line reaches the others over the communicator: a file beside the
  // checkpoints could not be written on the very disk that filled (nor where `checkpoints` is a
  // file), and the message said only which rank failed.
  constexpr size_t kMaxMessage = 4096;
  if (world_.rank() == lowest && problem.size() > kMaxMessage) problem.resize(kMaxMessage);
  double length = world_.rank() == lowest ? static_cast<double>(problem.size()) : 0;
  world_.broadcast(Tensor(&length, DType::f64, {1}), lowest);
  std::vector<double> words((static_cast<size_t>(length) + 7) / 8, 0.0);
  if (world_.rank() == lowest) std::memcpy(words.data(), problem.data(), problem.size());
  if (!words.empty()) {
    world_.broadcast(Tensor(words.data(), DType::f64, {static_cast<int64_t>(words.size())}),
                     lowest);
  }
  std::string message(reinterpret_cast<const char*>(words.data()), static_cast<size_t>(length));
  if (dir_.lead()) abandon_checkpoint(tmp);
  const std::string prefix = fmt::format("checkpoint of step {} not written: ", step);
  if (!message.starts_with(prefix)) message = prefix + message;
  throw Error(message);
}

void CheckpointWriter::agree(int64_t step, const std::string& tmp, const std::function<void()>& f) {
  std::string problem;
  try {
    f();
  } catch (const Error& e) {
    problem = e.what();
  }
  agree_on(step, tmp, std::move(problem));
}

std::vector<ShardRun> CheckpointWriter::owned_runs(int64_t* elements) {
  const Buffer& m = runner_.optimizer().first_moment();
  const Buffer& v = runner_.optimizer().second_moment();
  std::vector<ShardRun> runs;
  *elements = 0;
  for (const StepRunner::OwnedRun& r : runner_.owned_runs()) {
    auto at = [&](const Buffer& b, int64_t offset) -> const void* {
      return b.count() > 0 ? static_cast<const char*>(b.raw()) + offset * dtype_bytes_ : nullptr;
    };
    runs.push_back({r.global, r.length, at(*r.params, r.param_offset),
                    r.stateless ? nullptr : at(m, r.state_offset),
                    r.stateless ? nullptr : at(v, r.state_offset)});
    *elements += r.length;
  }
  return runs;
}

std::string CheckpointWriter::commit(int64_t step, const std::string& tmp, bool full,
                                     const CheckpointContents& c) {
  const Timer took;
  std::string where;
  agree(step, tmp, [&] {
    if (!dir_.lead()) return;
    if (full) {
      where = commit_full_checkpoint(dir_.path(), tmp, c, dtype_bytes_, config_.checkpoint.keep,
                                     note());
      return;
    }
    ShardedLayout layout;
    layout.world = world_.size();
    layout.elements = runner_.global_elements();
    layout.dtype_bytes = dtype_bytes_;
    layout.model_fingerprint = model_fingerprint(runner_.global_table());
    const ParallelConfig& p = config_.parallel;
    layout.writer = {{"dp", p.dp}, {"zero", p.zero}, {"tp", p.tp},
                     {"pp", p.pp}, {"cp", p.cp},     {"ep", p.ep}};
    where = commit_sharded_checkpoint(dir_.path(), tmp, layout, c, config_.checkpoint.keep, note());
  });
  costs_.commit_seconds += took.seconds();
  return where;
}

CheckpointNote CheckpointWriter::note() {
  return [this](const std::string& line) {
    if (noted_.insert(line).second) dir_.event(line);  // once per run, not at every checkpoint
  };
}

void CheckpointWriter::committed(int64_t step, const std::string& where, const std::string& how) {
  ++costs_.written;
  if (!dir_.lead()) return;
  dir_.event(fmt::format("checkpoint {} written{}", where, how));
  if (on_commit_) on_commit_(step, where);
}

void CheckpointWriter::save(int64_t step, uint64_t next_sample,
                            const std::vector<CheckpointPart*>& parts) {
  if (pending_) drain();
  const size_t before = tracker_.current_total();
  tracker_.start_window();
  const Timer took;
  std::vector<CheckpointFile> extra;
  for (CheckpointPart* part : parts) part->save(extra);
  CheckpointContents c{
      nullptr,      nullptr,
      nullptr,      {step, runner_.optimizer().steps_taken(), next_sample, config_.train.seed},
      config_toml_, std::move(extra)};
  if (config_.checkpoint.async) {
    start(step, std::move(c));
    costs_.snapshot_seconds += took.seconds();
  } else {
    write_now(step, c);
  }
  costs_.blocked_seconds += took.seconds();
  costs_.extra_bytes =
      std::max(costs_.extra_bytes, static_cast<double>(tracker_.window_peak_total() - before));
}

void CheckpointWriter::write_now(int64_t step, CheckpointContents& c) {
  if (config_.diloco.enabled()) {
    // The islands hold different weights: the lead gathers the outer model whole (full form).
    const DType dt = config_.model.dtype;
    const int64_t n = runner_.global_elements();
    Buffer params(tracker_, MemoryCategory::workspace, dt, n),
        m(tracker_, MemoryCategory::workspace, dt, n),
        v(tracker_, MemoryCategory::workspace, dt, n);
    runner_.gather_global_parameters(params);
    Buffer& fm = runner_.optimizer().first_moment();
    Buffer& sm = runner_.optimizer().second_moment();
    if (fm.count() > 0) runner_.gather_global_state(fm, m);
    if (sm.count() > 0) runner_.gather_global_state(sm, v);
    if (!dir_.lead()) return committed(step, "", "");
    c.params = &params;
    c.first_moment = &m;
    c.second_moment = &v;
    committed(step, write_checkpoint(dir_.path(), c, config_.checkpoint.keep, note()), "");
    return;
  }
  const std::string tmp = temp_path(dir_.path(), step);
  agree(step, tmp, [&] {
    if (dir_.lead()) TRILLION_CHECK(begin_sharded_checkpoint(dir_.path(), step) == tmp, tmp);
  });
  int64_t owned = 0;
  const std::vector<ShardRun> runs = owned_runs(&owned);
  // A buffer larger than one owned part would never fill: cap it there.
  const int64_t buffer_elements = std::min<int64_t>(
      static_cast<int64_t>(config_.checkpoint.write_buffer_mb * (1 << 20)) / dtype_bytes_, owned);
  const bool full = world_.size() == 1;
  {
    Buffer stage;
    if (buffer_elements > 0) {
      stage = Buffer(tracker_, MemoryCategory::workspace, config_.model.dtype, buffer_elements);
    }
    const WriteBuffer through{static_cast<char*>(stage.raw()), stage.bytes()};
    agree(step, tmp, [&] {
      try {
        if (full) {
          write_full_state(tmp, runs, runner_.global_elements(), dtype_bytes_, through);
        } else {
          write_checkpoint_shard(tmp, world_.rank(), runs, dtype_bytes_, through);
        }
        inject_disk_full(step, world_.rank(), tmp);
      } catch (const Error& e) {
        throw Error(fmt::format("checkpoint of step {} not written: {}", step, e.what()));
      }
    });
  }
  const std::string where = commit(step, tmp, full, c);
  committed(step, where, "");
}

void CheckpointWriter::start(int64_t step, CheckpointContents c) {
  auto p = std::make_unique<Pending>();
  p->step = step;
  p->tmp = temp_path(dir_.path(), step);
  p->full = world_.size() == 1;
  p->contents = std::move(c);
  agree(step, p->tmp, [&] {
    if (dir_.lead()) TRILLION_CHECK(begin_sharded_checkpoint(dir_.path(), step) == p->tmp, p->tmp);
  });
  // The snapshot: the owned runs back to back, parameters then each moment the optimizer has.
  int64_t owned = 0;
  std::vector<ShardRun> runs = owned_runs(&owned);
  const bool has_m = runner_.optimizer().first_moment().count() > 0;
  const bool has_v = runner_.optimizer().second_moment().count() > 0;
  const int64_t parts = 1 + (has_m ? 1 : 0) + (has_v ? 1 : 0);
  if (owned > 0) {
    p->snapshot = Buffer(tracker_, MemoryCategory::workspace, config_.model.dtype, parts * owned);
  }
  char* base = static_cast<char*>(p->snapshot.raw());
  const size_t part_bytes = static_cast<size_t>(owned) * dtype_bytes_;
  size_t at = 0;
  for (ShardRun& r : runs) {
    const size_t bytes = static_cast<size_t>(r.length) * dtype_bytes_;
    auto copy = [&](const void*& from, size_t section) {
      if (from == nullptr) return;
      char* to = base + section * part_bytes + at;
      std::memcpy(to, from, bytes);
      from = to;
    };
    copy(r.params, 0);
    copy(r.first_moment, 1);
    copy(r.second_moment, has_m ? 2 : 1);
    at += bytes;
  }
  // The thread touches only the snapshot and the files; the tracker and the communicator stay on
  // this thread.
  Pending* job = p.get();
  const int rank = world_.rank();
  const int64_t elements = runner_.global_elements();
  const int dtype_bytes = dtype_bytes_;
  job->thread = std::thread([job, runs = std::move(runs), rank, elements, dtype_bytes] {
    const Timer took;
    try {
      if (job->full) {
        write_full_state(job->tmp, runs, elements, dtype_bytes);
      } else {
        write_checkpoint_shard(job->tmp, rank, runs, dtype_bytes);
      }
      inject_disk_full(job->step, rank, job->tmp);
    } catch (const std::exception& e) {
      job->problem = fmt::format("checkpoint of step {} not written: {}", job->step, e.what());
    }
    job->seconds = took.seconds();
    job->done.store(true, std::memory_order_release);
  });
  pending_ = std::move(p);
}

void CheckpointWriter::poll(int64_t step) {
  if (!pending_) return;  // every rank agrees: checkpoints start and finish collectively
  const Timer took;
  double busy = pending_->done.load(std::memory_order_acquire) ? 0 : 1;
  world_.all_reduce(Tensor(&busy, DType::f64, {1}), comm::ReduceOp::max);
  if (busy == 0) finish(step);
  costs_.blocked_seconds += took.seconds();
}

void CheckpointWriter::drain() {
  if (!pending_) return;
  const Timer took;
  if (!pending_->done.load(std::memory_order_acquire)) ++costs_.waits;
  pending_->thread.join();
  const double waited = took.seconds();
  costs_.wait_seconds += waited;
  finish(-1);
  costs_.blocked_seconds += took.seconds();
}

void CheckpointWriter::finish(int64_t after_step) {
  std::unique_ptr<Pending> p = std::move(pending_);  // a throw below leaves nothing in flight
  if (p->thread.joinable()) p->thread.join();
  costs_.background_seconds += p->seconds;
  agree_on(p->step, p->tmp, p->problem);
  p->snapshot = Buffer();  // every rank's files are durable
  const std::string where = commit(p->step, p->tmp, p->full, p->contents);
  committed(p->step, where,
            after_step >= 0
                ? fmt::format(" (async: its files written while training went on; committed "
                              "after step {})",
                              after_step)
                : std::string(" (async: committed when drained)"));
}

}  // namespace trillion

namespace trillion {

nlohmann::json CheckpointWriter::summary(double step_seconds, double planned_extra_bytes) {
  const CheckpointCosts& cc = costs_;
  double cost[6] = {cc.blocked_seconds,    cc.extra_bytes,      cc.wait_seconds,
                    cc.background_seconds, cc.snapshot_seconds, cc.commit_seconds};
  if (world_.size() > 1) {  // the slowest rank's
    world_.all_reduce(Tensor(cost, DType::f64, {6}), comm::ReduceOp::max);
  }
  // Each rank's own extra bytes, measured and predicted: the bound is per rank (its shard, or
  // its write buffer).
  int64_t owned = 0;
  owned_runs(&owned);
  const int n = world_.size();
  std::vector<double> per_rank(2 * n, 0.0);
  per_rank[world_.rank()] = cc.extra_bytes;
  per_rank[n + world_.rank()] = checkpoint_extra_bytes(config_, owned, runner_.global_elements(),
                                                       runner_.table().total_elements());
  if (n > 1) world_.all_reduce(Tensor(per_rank.data(), DType::f64, {2 * n}), comm::ReduceOp::sum);
  return {{"written", cc.written},
          {"async", config_.checkpoint.async},
          {"seconds", cost[0]},
          {"seconds_per_checkpoint", cc.written > 0 ? cost[0] / cc.written : 0.0},
          {"wait_seconds", cost[2]},
          {"waits", cc.waits},
          {"background_seconds", cost[3]},
          {"snapshot_seconds", cost[4]},
          {"commit_seconds", cost[5]},
          {"step_seconds", step_seconds},
          {"extra_bytes", cost[1]},
          {"extra_bytes_per_rank", std::vector<double>(per_rank.begin(), per_rank.begin() + n)},
          {"predicted_extra_bytes", planned_extra_bytes},
          {"predicted_extra_bytes_per_rank",
           std::vector<double>(per_rank.begin() + n, per_rank.end())}};
}

}  // namespace trillion
