// See executor.h. Sends go from a staging copy (one [N, C] buffer per send in flight), so a slot
// never waits for a send before it is reused and no rank ever blocks on a send: the only blocking
// waits are a consumer waiting for its receive (which a validated schedule guarantees is sent)
// and the end of the step. Open MPI progresses non-blocking transfers only inside MPI calls, so
// every action ends with a test() of what is in flight.
#include "parallel/pipeline/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <tuple>

#include "core/error.h"
#include "core/timer.h"

namespace trillion::parallel {

using schedule::Action;
using schedule::ActionKind;

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

PipelineExecutor::PipelineExecutor(const schedule::Schedule& schedule, int rank,
                                   std::vector<StageModel*> stages, Backend& backend,
                                   MemoryTracker& tracker, comm::Communicator* pp)
    : schedule_(schedule),
      rank_(rank),
      be_(backend),
      tracker_(tracker),
      pp_(pp),
      stages_(std::move(stages)) {
  TRILLION_CHECK(static_cast<int>(stages_.size()) == schedule.num_chunks,
                 fmt::format("rank {} has {} stage(s) for {} chunk(s)", rank, stages_.size(),
                             schedule.num_chunks));
  const std::vector<int> need = schedule::inflight_slots(schedule, rank);
  for (int c = 0; c < schedule.num_chunks; ++c) {
    if (stages_[c]->slots() < need[c]) {
      throw Error(fmt::format(
          "the {} schedule keeps {} micro-batches of chunk {} in flight on "
          "rank {}, but its stage has {} activation slot(s)",
          schedule::schedule_kind_name(schedule.kind), need[c], c, rank, stages_[c]->slots()));
    }
  }
  list_ = schedule.actions.at(rank);
  // The receive each compute action consumes: RECV_F before its F, RECV_B before its B.
  std::map<std::tuple<int, int, int>, int> recv_at;  // (consumer kind, mb, chunk) -> position
  recv_of_.assign(list_.size(), -1);
  for (size_t i = 0; i < list_.size(); ++i) {
    const Action& a = list_[i];
    if (a.kind == ActionKind::kRecvF || a.kind == ActionKind::kRecvB) {
      const ActionKind consumer =
          a.kind == ActionKind::kRecvF ? ActionKind::kForward : ActionKind::kBackwardInput;
      recv_at[{static_cast<int>(consumer), a.microbatch, a.chunk}] =
          static_cast<int>(recv_positions_.size());
      recv_positions_.push_back(i);
    }
    const bool comm = a.kind == ActionKind::kRecvF || a.kind == ActionKind::kRecvB ||
                      a.kind == ActionKind::kSendF || a.kind == ActionKind::kSendB;
    if (comm && pp_ == nullptr) {
      throw Error(fmt::format("{} needs the pipeline group, and this rank has none",
                              schedule::to_string(a)));
    }
  }
  for (size_t i = 0; i < list_.size(); ++i) {
    const Action& a = list_[i];
    auto it = recv_at.find({static_cast<int>(a.kind), a.microbatch, a.chunk});
    if (it != recv_at.end()) recv_of_[i] = it->second;
    if (a.kind == ActionKind::kBackwardInput && a.group != schedule::ActionGroup::kFusedWithNextW &&
        !stages_[a.chunk]->split_backward()) {
      throw Error(fmt::format(
          "the {} schedule defers weight gradients (rank {}: {} is not fused with its W); its "
          "stages need split backward passes (parallel.split_backward = true)",
          schedule::schedule_kind_name(schedule.kind), rank, schedule::to_string(a)));
    }
  }
  peak_slots_.assign(stages_.size(), 0);
}

int PipelineExecutor::peer(const Action& a, int delta) const {
  return schedule_.path(a.microbatch)[a.stage + delta].rank;
}

int PipelineExecutor::tag(int microbatch, int boundary, bool gradient) const {
  // Unique per (micro-batch, stage boundary, direction); the boundary b joins stages b, b + 1.
  return (microbatch * schedule_.num_stages(microbatch) + boundary) * 2 + (gradient ? 1 : 0);
}

int PipelineExecutor::take_slot(int chunk) {
  TRILLION_CHECK(!free_[chunk].empty(), "no free activation slot (schedule and slots disagree)");
  const int s = free_[chunk].back();
  free_[chunk].pop_back();
  peak_slots_[chunk] = std::max(peak_slots_[chunk], ++in_use_[chunk]);
  return s;
}

void PipelineExecutor::release_slot(int chunk, int slot) {
  free_[chunk].push_back(slot);
  --in_use_[chunk];
}

void PipelineExecutor::post_receive(size_t position) {
  const Action& a = list_[recv_positions_[position]];
  StageModel& stage = *stages_[a.chunk];
  int& slot = slot_of_[a.chunk][a.microbatch];
  Tensor into;
  if (a.kind == ActionKind::kRecvF) {
    if (slot < 0) slot = take_slot(a.chunk);
    into = stage.input(slot);
    recv_handles_[position] =
        pp_->start_recv(into, peer(a, -1), tag(a.microbatch, a.stage - 1, false));
  } else {
    TRILLION_CHECK(slot >= 0, "a gradient arrives for a micro-batch without a forward");
    into = stage.grad(slot);
    recv_handles_[position] = pp_->start_recv(into, peer(a, +1), tag(a.microbatch, a.stage, true));
  }
  recv_posted_[position] = 1;
}

void PipelineExecutor::post_receives() {
  while (next_recv_ < recv_positions_.size()) {
    if (!recv_posted_[next_recv_]) {
      const Action& a = list_[recv_positions_[next_recv_]];
      const int slot = slot_of_[a.chunk][a.microbatch];
      const bool can =
          a.kind == ActionKind::kRecvF ? slot >= 0 || !free_[a.chunk].empty() : slot >= 0;
      if (!can) return;  // keep list order: later receives wait for this one's slot
      post_receive(next_recv_);
    }
    ++next_recv_;
  }
}

void PipelineExecutor::wait_receive(size_t position) {
  if (!recv_posted_[position]) post_receive(position);
  Timer t;
  recv_handles_[position]->wait();
  recv_handles_[position].reset();
  wait_seconds_ += t.seconds();
}

void PipelineExecutor::start_send(const Action& a, const Tensor& data, int dest, int t) {
  PendingSend p{Buffer(tracker_, MemoryCategory::workspace, data.dtype(), data.numel()), nullptr};
  be_.copy(p.staging.flat(), data.view({data.numel()}));
  p.handle = pp_->start_send(p.staging.flat(), dest, t);
  sends_.push_back(std::move(p));
}

void PipelineExecutor::poll() {
  for (comm::Handle& h : recv_handles_) {
    if (h) h->test();
  }
  std::erase_if(sends_, [](PendingSend& s) { return s.handle->test(); });
}

std::vector<double> PipelineExecutor::run(const MicroBatchSource& batches, double grad_scale,
                                          const DocumentSource& documents) {
  const int m = schedule_.num_microbatches;
  free_.assign(stages_.size(), {});
  for (size_t c = 0; c < stages_.size(); ++c) {
    for (int s = stages_[c]->slots() - 1; s >= 0; --s) free_[c].push_back(s);
  }
  slot_of_.assign(stages_.size(), std::vector<int>(m, -1));
  in_use_.assign(stages_.size(), 0);
  peak_slots_.assign(stages_.size(), 0);
  recv_handles_.clear();
  recv_handles_.resize(recv_positions_.size());
  recv_posted_.assign(recv_positions_.size(), 0);
  next_recv_ = 0;
  timeline_.clear();
  wait_seconds_ = 0;
  const comm::CommCounters pp_before = pp_ != nullptr ? pp_->counters() : comm::CommCounters{};
  std::vector<char> fused_done(stages_.size() * m, 0);  // W already run inside its B

  std::vector<double> losses(m, 0.0);
  std::vector<std::vector<int32_t>> tokens(m), targets(m), starts(m);
  const int64_t N = stages_[0]->tokens();
  auto load = [&](int mb) {  // this step's micro-batch data, read once
    if (!tokens[mb].empty()) return;
    tokens[mb].resize(N);
    targets[mb].resize(N);
    batches(mb, tokens[mb].data(), targets[mb].data());
  };
  // The chunk of the same micro-batch's neighbouring stage when it is on this rank, else -1.
  auto local_neighbour = [&](const Action& a, int delta) -> int {
    const int s = a.stage + delta;
    if (s < 0 || s >= schedule_.num_stages(a.microbatch)) return -1;
    const schedule::Placement& p = schedule_.path(a.microbatch)[s];
    return p.rank == rank_ ? p.chunk : -1;
  };
  auto timed = [&](const Action& a, auto&& body) {
    const double start = now_seconds();
    body();
    timeline_.push_back({a, start, now_seconds()});
  };

  for (size_t i = 0; i < list_.size(); ++i) {
    post_receives();
    const Action& a = list_[i];
    StageModel& stage = *stages_[a.chunk];
    int& slot = slot_of_[a.chunk][a.microbatch];
    const int last_stage = schedule_.num_stages(a.microbatch) - 1;
    switch (a.kind) {
      case ActionKind::kRecvF:
      case ActionKind::kRecvB: {
        const size_t position = static_cast<size_t>(
            std::find(recv_positions_.begin(), recv_positions_.end(), i) - recv_positions_.begin());
        if (!recv_posted_[position]) post_receive(position);
        break;
      }
      case ActionKind::kSendF:
        start_send(a, stage.output(slot), peer(a, +1), tag(a.microbatch, a.stage, false));
        break;
      case ActionKind::kSendB:
        start_send(a, stage.grad(slot), peer(a, -1), tag(a.microbatch, a.stage - 1, true));
        break;
      case ActionKind::kForward: {
        if (slot < 0) slot = take_slot(a.chunk);
        stage.set_microbatch(slot, a.microbatch);
        if (stage.has_embedding() || stage.has_head()) load(a.microbatch);
        if (stage.has_embedding()) stage.set_tokens(slot, tokens[a.microbatch].data());
        if (stage.has_head()) stage.set_targets(slot, targets[a.microbatch].data());
        if (documents) {
          if (starts[a.microbatch].empty()) documents(a.microbatch, starts[a.microbatch]);
          stage.set_documents(slot, starts[a.microbatch].data());
        }
        if (a.stage > 0) {
          const int prev = local_neighbour(a, -1);
          if (prev >= 0) {
            be_.copy(stage.input(slot), stages_[prev]->output(slot_of_[prev][a.microbatch]));
          } else {
            wait_receive(static_cast<size_t>(recv_of_[i]));
          }
        }
        timed(a, [&] { losses[a.microbatch] += stage.forward(slot); });
        break;
      }
      case ActionKind::kBackwardInput: {
        if (a.stage < last_stage && local_neighbour(a, +1) < 0) {
          wait_receive(static_cast<size_t>(recv_of_[i]));
        }
        const bool fuse =
            a.group == schedule::ActionGroup::kFusedWithNextW && !stage.split_backward();
        timed(a, [&] {
          if (fuse) {
            stage.backward(slot, grad_scale);
          } else {
            stage.backward_input(slot, grad_scale);
          }
        });
        const int prev = local_neighbour(a, -1);
        if (prev >= 0) {
          be_.copy(stages_[prev]->grad(slot_of_[prev][a.microbatch]), stage.grad(slot));
        }
        if (fuse) fused_done[a.chunk * m + a.microbatch] = 1;
        break;
      }
      case ActionKind::kBackwardWeight:
        if (!fused_done[a.chunk * m + a.microbatch]) {
          timed(a, [&] { stage.backward_weight(slot); });
        }
        // The slot is free for the next micro-batch; slot_of_ keeps naming it for the sends that
        // follow in the list (they copy out before anything can overwrite the gradient).
        release_slot(a.chunk, slot);
        break;
    }
    poll();
  }
  for (comm::Handle& h : recv_handles_) TRILLION_CHECK(!h, "a received message was never consumed");
  for (PendingSend& s : sends_) s.handle->wait();
  sends_.clear();
  sent_bytes_ = pp_ != nullptr ? (pp_->counters() - pp_before).sent(comm::Collective::send) : 0;
  return losses;
}

}  // namespace trillion::parallel
