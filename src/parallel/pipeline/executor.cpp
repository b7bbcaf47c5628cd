// See executor.h.
#include "parallel/pipeline/executor.h"

#include <fmt/format.h>

#include "core/error.h"
#include "schedule/simulator.h"

namespace trillion::parallel {

using schedule::Action;
using schedule::ActionKind;

PipelineExecutor::PipelineExecutor(const schedule::Schedule& schedule, int rank,
                                   std::vector<StageModel*> stages, Backend& backend)
    : schedule_(schedule), rank_(rank), be_(backend), stages_(std::move(stages)) {
  TRILLION_CHECK(static_cast<int>(stages_.size()) == schedule.num_chunks,
                 fmt::format("rank {} has {} stage(s) for {} chunk(s)", rank, stages_.size(),
                             schedule.num_chunks));
  const std::vector<int> need = schedule::inflight_slots(schedule, rank);
  for (int c = 0; c < schedule.num_chunks; ++c) {
    if (stages_[c]->slots() < need[c]) {
      throw Error(fmt::format("the {} schedule keeps {} micro-batches of chunk {} in flight on "
                              "rank {}, but its stage has {} activation slot(s)",
                              schedule::schedule_kind_name(schedule.kind), need[c], c, rank,
                              stages_[c]->slots()));
    }
  }
  const std::vector<Action>& list = schedule.actions.at(rank);
  fused_.assign(list.size(), 0);
  for (size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    if (a.kind != ActionKind::kBackwardInput) continue;
    const bool next_is_w = i + 1 < list.size() &&
                           list[i + 1].kind == ActionKind::kBackwardWeight &&
                           list[i + 1].microbatch == a.microbatch && list[i + 1].chunk == a.chunk;
    if (next_is_w && !stages_[a.chunk]->split_backward()) {
      fused_[i] = 1;
    } else if (!stages_[a.chunk]->split_backward()) {
      throw Error(fmt::format(
          "the {} schedule defers weight gradients (rank {}: {} is not followed by its W); "
          "its stages need split backward passes (parallel.split_backward = true)",
          schedule::schedule_kind_name(schedule.kind), rank, schedule::to_string(a)));
    }
  }
  free_.resize(stages_.size());
  for (size_t c = 0; c < stages_.size(); ++c) {
    for (int s = stages_[c]->slots() - 1; s >= 0; --s) free_[c].push_back(s);
  }
}

int PipelineExecutor::take_slot(int chunk) {
  TRILLION_CHECK(!free_[chunk].empty(), "no free activation slot (schedule and slots disagree)");
  const int s = free_[chunk].back();
  free_[chunk].pop_back();
  return s;
}

std::vector<double> PipelineExecutor::run(const MicroBatchSource& batches, double grad_scale) {
  const int m = schedule_.num_microbatches;
  slot_of_.assign(stages_.size(), std::vector<int>(m, -1));
  std::vector<double> losses(m, 0.0);
  std::vector<std::vector<int32_t>> tokens(m), targets(m);
  auto load = [&](int mb) {  // this step's micro-batch data, read once
    if (!tokens[mb].empty()) return;
    const int64_t N = stages_[0]->input(0).size(0);
    tokens[mb].resize(N);
    targets[mb].resize(N);
    batches(mb, tokens[mb].data(), targets[mb].data());
  };
  // The chunk of the same micro-batch's neighbouring stage, when it is on this rank.
  auto local_neighbour = [&](const Action& a, int delta) -> int {
    const int s = a.stage + delta;
    if (s < 0 || s >= schedule_.num_stages(a.microbatch)) return -1;
    const schedule::Placement& p = schedule_.path(a.microbatch)[s];
    return p.rank == rank_ ? p.chunk : -1;
  };

  const std::vector<Action>& list = schedule_.actions.at(rank_);
  for (size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    StageModel& stage = *stages_[a.chunk];
    int& slot = slot_of_[a.chunk][a.microbatch];
    switch (a.kind) {
      case ActionKind::kForward: {
        slot = take_slot(a.chunk);
        if (stage.has_embedding() || stage.has_head()) load(a.microbatch);
        if (stage.has_embedding()) stage.set_tokens(slot, tokens[a.microbatch].data());
        if (stage.has_head()) stage.set_targets(slot, targets[a.microbatch].data());
        if (a.stage > 0) {
          const int prev = local_neighbour(a, -1);
          if (prev < 0) {
            throw Error(fmt::format("{} needs activations from another rank: pipeline "
                                    "communication is not available in this build",
                                    schedule::to_string(a)));
          }
          be_.copy(stage.input(slot), stages_[prev]->output(slot_of_[prev][a.microbatch]));
        }
        losses[a.microbatch] += stage.forward(slot);
        break;
      }
      case ActionKind::kBackwardInput: {
        if (!stage.has_head() && local_neighbour(a, +1) < 0) {
          throw Error(fmt::format("{} needs gradients from another rank: pipeline "
                                  "communication is not available in this build",
                                  schedule::to_string(a)));
        }
        if (fused_[i]) {
          stage.backward(slot, grad_scale);
        } else {
          stage.backward_input(slot, grad_scale);
        }
        const int prev = local_neighbour(a, -1);
        if (prev >= 0) {
          be_.copy(stages_[prev]->grad(slot_of_[prev][a.microbatch]), stage.grad(slot));
        }
        if (fused_[i]) {
          free_[a.chunk].push_back(slot);
          slot = -1;
          ++i;  // the W it fused
        }
        break;
      }
      case ActionKind::kBackwardWeight:
        stage.backward_weight(slot);
        free_[a.chunk].push_back(slot);
        slot = -1;
        break;
      default:
        throw Error(fmt::format("{}: pipeline communication is not available in this build",
                                schedule::to_string(a)));
    }
  }
  return losses;
}

}  // namespace trillion::parallel
