// See step_runner.h: the run's parameters and optimizer state between this rank's shards and the
// one global parameter table (plan/parameter_table.h), for init, checkpoints, resharding and
// export. One holder of each tensor contributes it (tp rank 0 for tp-replicated tensors, ep
// position 0 for non-experts, the lower rank of a DualPipe pair, the first stage for a tied table).
#include <algorithm>
#include <array>

#include "parallel/global_layout.h"
#include "train/step_layout.h"
#include "train/step_runner.h"

namespace trillion {

void StepRunner::to_global(const Buffer& local, const Buffer& global) {
  be_.fill(global.flat(), 0.0);
  // DualPipe's two ranks of a pair hold the same tensors: the lower one contributes.
  const bool contributes = !mirror_ || pp_.rank() < pp_.size() - 1 - pp_.rank();
  // Experts differ per ep rank; everything else is replicated over ep: ep position 0 gives it.
  // With the experts over tp x ep the ep group holds the tp ranks too: its sum covers tp.
  const bool span = experts_over_tp(config_);
  const int ep_position = span ? ep_.rank() / tp_.size() : ep_.rank();
  parallel::local_to_global(
      be_, params_->table(), params_->shard(), local, global_table_, global, [&](int spec) {
        if (holds_tied_copy() && params_->table().spec(spec).name == "embed") return false;
        const bool expert = params_->table().spec(spec).shard.group == ShardGroup::ep;
        // tp shards land apart; tp-replicated tensors come from tp rank 0.
        const bool tp_shard = params_->table().spec(spec).shard.group == ShardGroup::tp;
        return contributes && (expert || ep_position == 0) &&
               (tp_shard || tp_.rank() == 0 || (expert && experts_differ_over_tp()));
      });
  if (ep_.size() > 1) ep_.all_reduce(global.flat());
  if (tp_.size() > 1 && !span) tp_.all_reduce(global.flat());
  if (pp_.size() > 1) pp_.all_reduce(global.flat());
}

void StepRunner::init_parameters(uint64_t seed) {
  parallel_->init_parameters(seed);
  // ZeRO-3: the expert instance holds its parameters itself (below ZeRO-3 both instances share
  // the model's buffer, which parallel_ has filled).
  if (expert_parallel_ && config_.parallel.zero == 3) expert_parallel_->init_parameters(seed);
  if (whole_) whole_->init(seed);
}

void StepRunner::gather_local_parameters(const Buffer& local) {
  parallel_->gather_parameters(local);
  if (expert_parallel_ && config_.parallel.zero == 3) expert_parallel_->gather_parameters(local);
  if (whole_) whole_->copy_to(local);
}

void StepRunner::load_local_parameters(const Buffer& local) {
  parallel_->load_parameters(local);
  if (expert_parallel_ && config_.parallel.zero == 3) expert_parallel_->load_parameters(local);
  if (whole_) whole_->load_from(local);
}

void StepRunner::gather_global_parameters(const Buffer& global) {
  Buffer local(tracker_, MemoryCategory::workspace, params_->dtype(), table().total_elements());
  gather_local_parameters(local);
  to_global(local, global);
}

void StepRunner::gather_global_state(const Buffer& state, const Buffer& global) {
  Buffer local(tracker_, MemoryCategory::workspace, params_->dtype(), table().total_elements());
  parallel_->gather_state(state, local);
  if (expert_parallel_) expert_parallel_->gather_state(state, local);
  to_global(local, global);
}

void StepRunner::load_global_parameters(const Buffer& global) {
  Buffer local(tracker_, MemoryCategory::workspace, params_->dtype(), table().total_elements());
  parallel::global_to_local(be_, global_table_, global, params_->table(), params_->shard(), local);
  load_local_parameters(local);
}

void StepRunner::load_global_state(const Buffer& global, const Buffer& state) {
  Buffer local(tracker_, MemoryCategory::workspace, params_->dtype(), table().total_elements());
  parallel::global_to_local(be_, global_table_, global, params_->table(), params_->shard(), local);
  parallel_->load_state(local, state);
  if (expert_parallel_) expert_parallel_->load_state(local, state);
}

std::vector<StepRunner::OwnedRun> StepRunner::owned_runs() {
  // One holder of each tensor writes it, as to_global chooses; data parallelism then splits what
  // a holder has among the dp (or edp) ranks.
  const bool contributes = !mirror_ || pp_.rank() < pp_.size() - 1 - pp_.rank();
  std::vector<OwnedRun> runs;
  if (!contributes) return runs;
  const TensorTable& local = params_->table();
  std::vector<std::vector<std::array<int64_t, 3>>> blocks(local.size());  // local, global, n
  parallel::for_each_global_run(local, params_->shard(), global_table_,
                                [&](int spec, int64_t from, int64_t to, int64_t n) {
                                  blocks[spec].push_back({from, to, n});
                                });
  auto add = [&](parallel::DataParallel& dp) {
    const Buffer& held = dp.optimizer_params();
    for (const parallel::CheckpointPiece& p : dp.checkpoint_pieces()) {
      const ShardGroup group = local.spec(p.spec).shard.group;
      // tp-replicated tensors come from tp rank 0 (experts over tp x ep differ per tp rank).
      const bool per_tp_rank =
          group == ShardGroup::tp || (group == ShardGroup::ep && experts_differ_over_tp());
      if (!per_tp_rank && tp_.rank() != 0) continue;
      if (holds_tied_copy() && local.spec(p.spec).name == "embed") continue;  // the first's

      for (const auto& [from, to, n] : blocks[p.spec]) {
        const int64_t a = std::max(from, p.table_offset);
        const int64_t z = std::min(from + n, p.table_offset + p.length);
        if (a >= z) continue;
        const int64_t skip = a - p.table_offset;
        runs.push_back(
            {to + (a - from), z - a, &held, p.param_offset + skip, p.state_offset + skip});
      }
    }
  };
  add(*parallel_);
  if (expert_parallel_) add(*expert_parallel_);
  // Tensors kept whole (replicated over dp x cp, ep and tp): the first rank of each writes them.
  if (whole_ && reduce_.rank() == 0 && ep_.rank() == 0 && tp_.rank() == 0) {
    for (int spec : whole_->specs()) {
      for (const auto& [from, to, n] : blocks[spec]) {
        const int64_t at = whole_->offset_of(spec) + (from - local.spec(spec).offset);
        runs.push_back({to, n, &whole_->buffer(), at, 0, true});
      }
    }
  }
  return runs;
}

void StepRunner::load_parameters_from(const GlobalReader& read) {
  Buffer local(tracker_, MemoryCategory::workspace, params_->dtype(), table().total_elements());
  parallel::for_each_global_run(
      table(), params_->shard(), global_table_,
      [&](int, int64_t to, int64_t from, int64_t n) { read(from, local.view(to, {n})); });
  load_local_parameters(local);
}

void StepRunner::load_state_from(const GlobalReader& read, const Buffer& state) {
  Buffer local(tracker_, MemoryCategory::workspace, params_->dtype(), table().total_elements());
  parallel::for_each_global_run(
      table(), params_->shard(), global_table_,
      [&](int, int64_t to, int64_t from, int64_t n) { read(from, local.view(to, {n})); });
  parallel_->load_state(local, state);
  if (expert_parallel_) expert_parallel_->load_state(local, state);
}

}  // namespace trillion
