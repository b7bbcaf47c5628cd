// See simulator.h. Dependencies are looked up in flat tables indexed by (micro-batch, stage);
// the simulation sweeps the ranks repeatedly, advancing each as far as its inputs allow, and
// stops when everything ran or a full sweep made no progress (deadlock).
#include "schedule/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "core/error.h"

namespace trillion::schedule {
namespace {

using K = ActionKind;
constexpr double kUnknown = -1.0;

struct Tables {
  int max_stages = 0;
  // End times by kind: F, B, W, SEND_F, SEND_B, RECV_F, RECV_B; -1 while not yet run.
  std::vector<double> t[7];
  Tables(const Schedule& s) {
    for (const auto& path : s.paths) max_stages = std::max<int>(max_stages, path.size());
    for (auto& v : t) v.assign(static_cast<size_t>(s.num_microbatches) * max_stages, kUnknown);
  }
  double& at(K kind, int mb, int stage) {
    return t[static_cast<int>(kind)][static_cast<size_t>(mb) * max_stages + stage];
  }
};

// Time at which action a may start given what already ran; kUnknown when an input is missing.
double ready_time(const Schedule& s, Tables& tab, const Action& a, double comm) {
  const auto& path = s.path(a.microbatch);
  const int last = static_cast<int>(path.size()) - 1, mb = a.microbatch, st = a.stage;
  switch (a.kind) {
    case K::kForward:
      if (st == 0) return 0.0;
      return path[st - 1].rank == a.rank ? tab.at(K::kForward, mb, st - 1)
                                         : tab.at(K::kRecvF, mb, st);
    case K::kBackwardInput: {
      const double f = tab.at(K::kForward, mb, st);
      if (f == kUnknown) return kUnknown;
      if (st == last) return f;
      const double g = path[st + 1].rank == a.rank ? tab.at(K::kBackwardInput, mb, st + 1)
                                                   : tab.at(K::kRecvB, mb, st);
      return g == kUnknown ? kUnknown : std::max(f, g);
    }
    case K::kBackwardWeight:
      return tab.at(K::kBackwardInput, mb, st);
    case K::kSendF:
      return tab.at(K::kForward, mb, st);
    case K::kSendB:
      return tab.at(K::kBackwardInput, mb, st);
    case K::kRecvF: {
      if (st == 0) return kUnknown;
      const double t = tab.at(K::kSendF, mb, st - 1);
      return t == kUnknown ? kUnknown : t + comm;
    }
    case K::kRecvB: {
      if (st == last) return kUnknown;
      const double t = tab.at(K::kSendB, mb, st + 1);
      return t == kUnknown ? kUnknown : t + comm;
    }
  }
  return kUnknown;
}

double cost_of(const Schedule& s, const OpCosts& c, K kind) {
  switch (kind) {
    case K::kForward:
      return c.forward * s.chunk_fraction;
    case K::kBackwardInput:
      return c.backward_input * s.chunk_fraction;
    case K::kBackwardWeight:
      return c.backward_weight * s.chunk_fraction;
    default:
      return 0.0;
  }
}


// The simulation, with compute cost `cost(action)` and communication latency `comm`.
template <typename Cost>
Simulation play(const Schedule& s, Cost cost, double comm, bool record_timeline) {
  const int p = s.num_ranks;
  Tables tab(s);
  Simulation sim;
  sim.timeline.assign(p, {});
  sim.busy.assign(p, 0.0);
  sim.peak_inflight.assign(p, 0.0);
  std::vector<size_t> next(p, 0);
  std::vector<double> clock(p, 0.0), inflight(p, 0.0);
  size_t remaining = 0;
  for (const auto& list : s.actions) remaining += list.size();
  while (remaining > 0) {
    bool progress = false;
    for (int r = 0; r < p; ++r) {
      while (next[r] < s.actions[r].size()) {
        const Action& a = s.actions[r][next[r]];
        const double ready = ready_time(s, tab, a, comm);
        if (ready == kUnknown) break;
        const double start = std::max(clock[r], ready);
        const double end = start + cost(a);
        tab.at(a.kind, a.microbatch, a.stage) = end;
        if (record_timeline) sim.timeline[r].push_back({a, start, end});
        if (is_compute(a.kind)) sim.busy[r] += end - start;
        if (a.kind == K::kForward) inflight[r] += s.chunk_fraction;
        if (a.kind == K::kBackwardWeight) inflight[r] -= s.chunk_fraction;
        sim.peak_inflight[r] = std::max(sim.peak_inflight[r], inflight[r]);
        clock[r] = end;  // a RECV ends when its data arrives: waiting, not busy time
        sim.makespan = std::max(sim.makespan, clock[r]);
        ++next[r];
        --remaining;
        progress = true;
      }
    }
    if (!progress) {
      std::string blocked;
      for (int r = 0; r < p; ++r)
        if (next[r] < s.actions[r].size())
          blocked += fmt::format(" rank {} at {};", r, to_string(s.actions[r][next[r]]));
      throw Error(fmt::format("{} schedule deadlocks: no rank can proceed:{}",
                              schedule_kind_name(s.kind), blocked));
    }
  }
  double idle = 0.0;
  for (int r = 0; r < p; ++r) idle += sim.makespan - sim.busy[r];
  sim.bubble_fraction = sim.makespan > 0 ? idle / (p * sim.makespan) : 0.0;
  return sim;
}

}  // namespace

Simulation simulate(const Schedule& s, const OpCosts& costs, bool record_timeline) {
  return play(s, [&](const Action& a) { return cost_of(s, costs, a.kind); }, costs.comm,
              record_timeline);
}

Simulation simulate(const Schedule& s, const ChunkCosts& costs, double comm,
                    bool record_timeline) {
  if (static_cast<int>(costs.size()) != s.num_ranks) {
    throw Error(fmt::format("per-chunk costs for {} ranks, the schedule has {}", costs.size(),
                            s.num_ranks));
  }
  for (const auto& rank : costs) {
    if (static_cast<int>(rank.size()) != s.num_chunks) {
      throw Error(fmt::format("per-chunk costs for {} chunks, the schedule has {}", rank.size(),
                              s.num_chunks));
    }
  }
  return play(
      s,
      [&](const Action& a) {
        const OpCosts& c = costs[a.rank][a.chunk];
        switch (a.kind) {
          case K::kForward:
            return c.forward;
          case K::kBackwardInput:
            return c.backward_input;
          case K::kBackwardWeight:
            return c.backward_weight;
          default:
            return 0.0;
        }
      },
      comm, record_timeline);
}

std::vector<int> inflight_slots(const Schedule& s, int rank) {
  std::vector<int> now(s.num_chunks, 0), peak(s.num_chunks, 0);
  for (const Action& a : s.actions.at(rank)) {
    if (a.kind == ActionKind::kForward) peak[a.chunk] = std::max(peak[a.chunk], ++now[a.chunk]);
    if (a.kind == ActionKind::kBackwardWeight) --now[a.chunk];
  }
  return peak;
}

std::vector<std::string> validate(const Schedule& s) {
  std::vector<std::string> problems;
  if (static_cast<int>(s.actions.size()) != s.num_ranks) {
    problems.push_back(
        fmt::format("schedule has {} rank lists for {} ranks", s.actions.size(), s.num_ranks));
    return problems;
  }
  // (kind, mb, stage) -> (rank, position in that rank's list)
  std::map<std::tuple<int, int, int>, std::pair<int, int>> seen;
  for (int r = 0; r < s.num_ranks; ++r) {
    for (int i = 0; i < static_cast<int>(s.actions[r].size()); ++i) {
      const Action& a = s.actions[r][i];
      const std::string where = fmt::format("rank {} action {}", r, to_string(a));
      if (a.microbatch < 0 || a.microbatch >= s.num_microbatches || a.stage < 0 ||
          a.stage >= s.num_stages(a.microbatch)) {
        problems.push_back(where + " names a micro-batch or stage outside the schedule");
        continue;
      }
      if (s.path(a.microbatch)[a.stage].rank != r)
        problems.push_back(where + " runs a stage placed on another rank");
      if (!seen.emplace(std::tuple{static_cast<int>(a.kind), a.microbatch, a.stage},
                        std::pair{r, i})
               .second)
        problems.push_back(where + " appears twice");
    }
  }
  auto find = [&](K kind, int mb, int st) -> const std::pair<int, int>* {
    auto it = seen.find({static_cast<int>(kind), mb, st});
    return it == seen.end() ? nullptr : &it->second;
  };
  for (int mb = 0; mb < s.num_microbatches; ++mb) {
    const auto& path = s.path(mb);
    for (int st = 0; st < static_cast<int>(path.size()); ++st) {
      const auto *f = find(K::kForward, mb, st), *b = find(K::kBackwardInput, mb, st),
                 *w = find(K::kBackwardWeight, mb, st);
      if (!f || !b || !w) {
        problems.push_back(fmt::format("micro-batch {} stage {} lacks its F, B or W", mb, st));
        continue;
      }
      if (!(f->second < b->second && b->second < w->second))
        problems.push_back(
            fmt::format("micro-batch {} stage {} does not run F before B before W", mb, st));
      const bool prev_remote = st > 0 && path[st - 1].rank != path[st].rank;
      const bool next_remote =
          st + 1 < static_cast<int>(path.size()) && path[st + 1].rank != path[st].rank;
      // Each cross-rank edge needs SEND on the producer after it, RECV on the consumer before it.
      auto edge = [&](K send, int send_st, const std::pair<int, int>* producer, K recv, int recv_st,
                      const std::pair<int, int>* consumer, const char* what) {
        const auto *sd = find(send, mb, send_st), *rv = find(recv, mb, recv_st);
        const std::string tag =
            fmt::format("{} of micro-batch {} from stage {}", what, mb, send_st);
        if (!sd || !rv) {
          problems.push_back(tag + " lacks its SEND or its RECV");
          return;
        }
        if (producer && sd->second < producer->second)
          problems.push_back(tag + " is sent before it is computed");
        if (consumer && rv->second > consumer->second)
          problems.push_back(tag + " is received after it is used");
      };
      if (next_remote)
        edge(K::kSendF, st, f, K::kRecvF, st + 1, find(K::kForward, mb, st + 1), "activation");
      if (prev_remote)
        edge(K::kSendB, st, b, K::kRecvB, st - 1, find(K::kBackwardInput, mb, st - 1), "gradient");
    }
  }
  if (problems.empty()) {
    try {
      simulate(s, OpCosts{});
    } catch (const Error& e) {
      problems.push_back(e.what());
    }
  }
  return problems;
}

}  // namespace trillion::schedule
