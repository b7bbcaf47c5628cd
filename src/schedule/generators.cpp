// See generators.h. Orders follow the papers: GPipe (1811.06965: all forwards, then all
// backwards), 1F1B (PipeDream-Flush, 2006.09503: p-r-1 warm-up forwards on rank r), interleaved
// 1F1B (Narayanan et al. 2104.04473 §2.2: chunks visited in groups of p micro-batches), ZB-H1/H2
// (Qi et al. 2401.10241 §3: 1F1B's F/B order, W placed into bubbles by list scheduling) and
// DualPipe (DeepSeek-V3 2412.19437 §3.2.1: the eight-phase order of its open schedule).
#include "schedule/generators.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <limits>

#include "core/error.h"

namespace trillion::schedule {
namespace {

using K = ActionKind;
using Fused = std::vector<std::vector<char>>;  // per action: one of the marks below
constexpr char kSplit = 0;                     // runs alone
constexpr char kFusedWithW = 1;                // a B whose W follows it as one fused backward
constexpr char kPairedWithNext = 2;  // an F overlapped with the B after it (DualPipe's F&B)

// Appends compute actions to one rank's list; fills stage from the schedule's paths.
struct RankWriter {
  const Schedule& s;
  std::vector<Action>& out;
  int rank;
  std::vector<std::vector<char>>* fused = nullptr;          // marks Bs whose W is fused to them
  const std::vector<std::vector<int>>* stage_of = nullptr;  // [path][rank * v + chunk]
  void add(K kind, int mb, int chunk) {
    const int stage = (*stage_of)[s.path_of[mb]][rank * s.num_chunks + chunk];
    TRILLION_CHECK(stage >= 0, "micro-batch path does not visit this rank/chunk");
    out.push_back({rank, kind, mb, chunk, stage});
    if (fused) (*fused)[rank].push_back(0);
  }
  void mark_fused() { mark(kFusedWithW); }
  void mark(char m) {
    if (fused) (*fused)[rank].back() = m;
  }
  void backward(int mb, int chunk) {  // unsplit backward: dgrad then wgrad back to back
    add(K::kBackwardInput, mb, chunk);
    mark_fused();
    add(K::kBackwardWeight, mb, chunk);
  }
};

// Per-schedule context of the generators: the grouping marks they write and, per path, the stage
// index of (rank, chunk) (-1: not on the path).
struct Ctx {
  Fused fused;
  std::vector<std::vector<int>> lookup;
  explicit Ctx(const Schedule& s) : fused(s.num_ranks) {
    lookup.assign(s.paths.size(), std::vector<int>(s.num_ranks * s.num_chunks, -1));
    for (size_t d = 0; d < s.paths.size(); ++d)
      for (size_t i = 0; i < s.paths[d].size(); ++i)
        lookup[d][s.paths[d][i].rank * s.num_chunks + s.paths[d][i].chunk] = static_cast<int>(i);
  }
};

void single_path(Schedule& s, int v) {
  s.paths.assign(1, {});
  for (int c = 0; c < v; ++c)
    for (int r = 0; r < s.num_ranks; ++r) s.paths[0].push_back({r, c});
  s.path_of.assign(s.num_microbatches, 0);
}

void gpipe(Schedule& s, Ctx& ctx) {
  for (int r = 0; r < s.num_ranks; ++r) {
    RankWriter w{s, s.actions[r], r, &ctx.fused, &ctx.lookup};
    for (int mb = 0; mb < s.num_microbatches; ++mb) w.add(K::kForward, mb, 0);
    for (int mb = 0; mb < s.num_microbatches; ++mb) w.backward(mb, 0);
  }
}

void one_f_one_b(Schedule& s, Ctx& ctx) {
  const int p = s.num_ranks, m = s.num_microbatches;
  for (int r = 0; r < p; ++r) {
    RankWriter w{s, s.actions[r], r, &ctx.fused, &ctx.lookup};
    const int warmup = std::min(p - r - 1, m);
    for (int mb = 0; mb < warmup; ++mb) w.add(K::kForward, mb, 0);
    for (int i = 0; i < m - warmup; ++i) {
      w.add(K::kForward, warmup + i, 0);
      w.backward(i, 0);
    }
    for (int mb = m - warmup; mb < m; ++mb) w.backward(mb, 0);
  }
}

// Megatron's interleaved order: the k-th forward on a rank is micro-batch group k/(p v) * p + k%p
// of chunk (k/p)%v; backwards walk the chunks in reverse. Rank r warms up with
// 2(p-r-1) + (v-1)p forwards so that the first backward's gradient has arrived.
void interleaved(Schedule& s, Ctx& ctx) {
  const int p = s.num_ranks, m = s.num_microbatches, v = s.num_chunks, n = m * v;
  auto mb_of = [&](int k) { return (k / (p * v)) * p + k % p; };
  auto chunk_of = [&](int k, bool forward) {
    const int c = (k % (p * v)) / p;
    return forward ? c : v - 1 - c;
  };
  for (int r = 0; r < p; ++r) {
    RankWriter w{s, s.actions[r], r, &ctx.fused, &ctx.lookup};
    const int warmup = std::min(2 * (p - r - 1) + (v - 1) * p, n);
    for (int k = 0; k < warmup; ++k) w.add(K::kForward, mb_of(k), chunk_of(k, true));
    for (int i = 0; i < n - warmup; ++i) {
      w.add(K::kForward, mb_of(warmup + i), chunk_of(warmup + i, true));
      w.backward(mb_of(i), chunk_of(i, false));
    }
    for (int k = n - warmup; k < n; ++k) w.backward(mb_of(k), chunk_of(k, false));
  }
}

// Zero-bubble schedules (Qi et al. 2401.10241 §3): each rank keeps 1F1B's order of F and B
// (warm-up of w_r forwards, then alternate), and W is placed by playing time forward with the
// given costs: an idle rank whose next F/B has no input yet runs a deferred W, which fills what
// would otherwise be a bubble; a W also runs first when the next F would exceed the in-flight cap
// (F started, W not done). ZB-H1: w_r = p-r-1, cap p (1F1B's memory); ZB-H2: w_r = 2(p-r)-2,
// cap 2p-1. In one step simulated alone ZB-H2 idles (p-1) max(T_F + T_B - 2 T_W, T_F) per rank:
// the paper's (p-1)(T_F + T_B - 2 T_W), floored by the ramp-up of (p-1) T_F that only bypassing
// the optimizer synchronisation between steps (Qi et al. §4) removes.
void zero_bubble(Schedule& s, const OpCosts& c, bool h2, Ctx& ctx) {
  const int p = s.num_ranks, m = s.num_microbatches;
  constexpr double kNever = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> f_end(p, std::vector<double>(m, kNever));
  std::vector<std::vector<double>> b_end(p, std::vector<double>(m, kNever));
  std::vector<std::vector<std::pair<K, int>>> order(p);  // F/B order per rank
  for (int r = 0; r < p; ++r) {
    const int warmup = std::min(h2 ? 2 * (p - r) - 2 : p - r - 1, m);
    for (int mb = 0; mb < warmup; ++mb) order[r].emplace_back(K::kForward, mb);
    for (int i = 0; i < m - warmup; ++i) {
      order[r].emplace_back(K::kForward, warmup + i);
      order[r].emplace_back(K::kBackwardInput, i);
    }
    for (int mb = m - warmup; mb < m; ++mb) order[r].emplace_back(K::kBackwardInput, mb);
  }
  std::vector<double> free_at(p, 0.0);
  std::vector<size_t> next(p, 0);
  std::vector<int> inflight(p, 0), done_w(p, 0);
  std::vector<std::deque<int>> pending_w(p);
  auto ready = [&](int r) {  // when the next F/B's input exists (kNever: not yet known)
    const auto [kind, mb] = order[r][next[r]];
    if (kind == K::kForward) return r == 0 ? 0.0 : f_end[r - 1][mb] + c.comm;
    return r == p - 1 ? f_end[r][mb] : b_end[r + 1][mb] + c.comm;
  };
  double now = 0.0;
  while (true) {
    bool all_done = true;
    for (int r = 0; r < p; ++r) {
      RankWriter w{s, s.actions[r], r, &ctx.fused, &ctx.lookup};
      const int cap = h2 ? 2 * p - 1 : p;
      while (free_at[r] <= now && done_w[r] < m) {
        const bool has_next = next[r] < order[r].size();
        const bool next_ready = has_next && ready(r) <= now;
        const bool over_cap =
            has_next && order[r][next[r]].first == K::kForward && inflight[r] >= cap;
        if (next_ready && !over_cap) {
          const auto [kind, mb] = order[r][next[r]++];
          w.add(kind, mb, 0);
          if (kind == K::kForward) {
            f_end[r][mb] = free_at[r] = now + c.forward;
            ++inflight[r];
          } else {
            b_end[r][mb] = free_at[r] = now + c.backward_input;
            pending_w[r].push_back(mb);
          }
        } else if (!pending_w[r].empty()) {
          w.add(K::kBackwardWeight, pending_w[r].front(), 0);
          pending_w[r].pop_front();
          free_at[r] = now + c.backward_weight;
          --inflight[r];
          ++done_w[r];
        } else {
          break;
        }
      }
      if (done_w[r] < m) all_done = false;
    }
    if (all_done) break;
    double later = kNever;
    for (int r = 0; r < p; ++r) {
      if (free_at[r] > now) later = std::min(later, free_at[r]);
      if (next[r] < order[r].size() && ready(r) > now) later = std::min(later, ready(r));
    }
    TRILLION_CHECK(later < kNever, "zero-bubble list scheduling made no progress");
    now = later;
  }
}

// DualPipe: rank r holds stage r of the "down" copy (chunk 0, micro-batches [0, m/2)) and stage
// p-1-r of the "up" copy (chunk 1, micro-batches [m/2, m)). "Phase 0" is the copy whose first
// stage is on this rank's half of the pipeline. The eight phases below follow the published
// schedule; an overlapped "F&B" pair is written as F then B, marked so that both receive before
// and send after the pair (the simulator runs the two in turn, i.e. F&B = F + B).
void dualpipe(Schedule& s, Ctx& ctx) {
  const int p = s.num_ranks, m = s.num_microbatches, half = p / 2, half_m = m / 2;
  for (int r = 0; r < p; ++r) {
    RankWriter w{s, s.actions[r], r, &ctx.fused, &ctx.lookup};
    const int hr = std::min(r, p - 1 - r);
    const int flip = r >= half ? 1 : 0;
    int next_f[2] = {0, 0}, next_b[2] = {0, 0};
    std::deque<std::pair<int, int>> deferred;  // (mb, chunk) whose W waits
    auto chunk = [&](int phase) { return phase ^ flip; };
    auto F = [&](int phase) {
      const int c = chunk(phase);
      w.add(K::kForward, c * half_m + next_f[phase]++, c);
    };
    auto B = [&](int phase, bool zero_bubble) {
      const int c = chunk(phase), mb = c * half_m + next_b[phase]++;
      w.add(K::kBackwardInput, mb, c);
      if (zero_bubble) {
        deferred.emplace_back(mb, c);
      } else {
        w.mark_fused();
        w.add(K::kBackwardWeight, mb, c);
      }
    };
    auto W = [&] {
      TRILLION_CHECK(!deferred.empty(), "DualPipe order asked for a W with none deferred");
      w.add(K::kBackwardWeight, deferred.front().first, deferred.front().second);
      deferred.pop_front();
    };
    for (int i = 0; i < (half - hr - 1) * 2; ++i) F(0);             // 1: nF0
    for (int i = 0; i < hr + 1; ++i) F(0), F(1);                    // 2: nF0F1
    for (int i = 0; i < half - hr - 1; ++i) B(1, true), W(), F(1);  // 3: nB1W1F1
    auto FB = [&](int f_phase, int b_phase) {  // overlapped forward-and-backward pair
      F(f_phase);
      w.mark(kPairedWithNext);
      B(b_phase, false);
    };
    for (int i = 0; i < half_m - p + hr + 1; ++i) {  // 4: nF0B1F1B0
      if (i == 0 && hr == half - 1) {                // middle ranks do not overlap the first pair
        F(0);
        B(1, false);
      } else {
        FB(0, 1);
      }
      FB(1, 0);
    }
    for (int i = 0; i < half - hr - 1; ++i) B(1, false), FB(1, 0);  // 5: nB1F1B0
    const int step6 = hr + 1;                                       // 6: nB1B0
    bool zb = false;
    for (int i = 0; i < step6; ++i) {
      if (i == step6 / 2 && hr % 2 == 1) zb = true;
      B(1, zb);
      if (i == step6 / 2 && hr % 2 == 0) zb = true;
      B(0, zb);
    }
    for (int i = 0; i < half - hr - 1; ++i) W(), B(0, true);  // 7: nWB0
    for (int i = 0; i < hr + 1; ++i) W();                     // 8: nW
    while (!deferred.empty()) W();
  }
}

}  // namespace

void insert_communication(Schedule& s, const std::vector<std::vector<char>>& marks) {
  for (int r = 0; r < s.num_ranks; ++r) {
    const std::vector<Action>& in = s.actions[r];
    auto mark = [&](size_t i) { return marks.empty() ? kSplit : marks[r][i]; };
    std::vector<Action> out;
    for (size_t i = 0; i < in.size();) {
      // A group runs as one unit: its inputs are received before it and its outputs sent after
      // it. A fused backward is B+W (the gradient leaves after both halves); an overlapped
      // DualPipe pair is F+B(+W): both results leave when the pair ends.
      size_t end = i + 1;
      if (in[i].kind == K::kForward && mark(i) == kPairedWithNext) ++end;
      if (end - 1 < in.size() && in[end - 1].kind == K::kBackwardInput &&
          mark(end - 1) == kFusedWithW)
        ++end;
      TRILLION_CHECK(end <= in.size(), "a fused group runs past the end of the rank's list");
      auto comm = [&](const Action& a, bool before) {
        const auto& path = s.path(a.microbatch);
        const int last = static_cast<int>(path.size()) - 1;
        const bool prev_remote = a.stage > 0 && path[a.stage - 1].rank != r;
        const bool next_remote = a.stage < last && path[a.stage + 1].rank != r;
        Action c = a;
        c.group = ActionGroup::kAlone;
        if (a.kind == K::kForward && (before ? prev_remote : next_remote))
          c.kind = before ? K::kRecvF : K::kSendF;
        else if (a.kind == K::kBackwardInput && (before ? next_remote : prev_remote))
          c.kind = before ? K::kRecvB : K::kSendB;
        else
          return;
        out.push_back(c);
      };
      for (size_t k = i; k < end; ++k) comm(in[k], true);
      for (size_t k = i; k < end; ++k) {
        Action a = in[k];
        if (mark(k) == kFusedWithW) a.group = ActionGroup::kFusedWithNextW;
        if (mark(k) == kPairedWithNext) a.group = ActionGroup::kPairedWithNextB;
        out.push_back(a);
      }
      for (size_t k = i; k < end; ++k) comm(in[k], false);
      i = end;
    }
    s.actions[r] = std::move(out);
  }
}

Schedule generate_schedule(ScheduleKind kind, int p, int m, int v, const OpCosts& costs) {
  if (p < 1) throw Error(fmt::format("pipeline stages must be >= 1, got {}", p));
  if (m < 1) throw Error(fmt::format("micro-batches must be >= 1, got {}", m));
  if (kind == ScheduleKind::kInterleaved) {
    if (v < 2)
      throw Error(fmt::format(
          "interleaved needs chunks >= 2 (--chunks V or --layout ...,chunks=V), got {}", v));
    if (m % p != 0)
      throw Error(fmt::format(
          "interleaved needs micro-batches ({}) to be a multiple of stages ({})", m, p));
  } else if (kind == ScheduleKind::kDualPipe) {
    if (p % 2 != 0 || m % 2 != 0 || m < 2 * p)
      throw Error(
          fmt::format("dualpipe needs an even number of stages and an even number of "
                      "micro-batches >= 2 x stages, got stages={} micro-batches={}",
                      p, m));
    v = 2;
  } else if (v != 1) {
    throw Error(fmt::format("{} uses one chunk per rank; --chunks {} applies to interleaved only",
                            schedule_kind_name(kind), v));
  }
  if (costs.forward <= 0 || costs.backward_input <= 0 || costs.backward_weight < 0 ||
      costs.comm < 0)
    throw Error("op costs must be F > 0, B > 0, W >= 0, comm >= 0");
  Schedule s;
  s.kind = kind;
  s.num_ranks = p;
  s.num_microbatches = m;
  s.num_chunks = v;
  s.chunk_fraction = kind == ScheduleKind::kInterleaved ? 1.0 / v : 1.0;
  s.actions.assign(p, {});
  if (kind == ScheduleKind::kDualPipe) {
    s.paths.assign(2, {});
    for (int r = 0; r < p; ++r) s.paths[0].push_back({r, 0});
    for (int r = p - 1; r >= 0; --r) s.paths[1].push_back({r, 1});
    s.path_of.assign(m, 0);
    for (int mb = m / 2; mb < m; ++mb) s.path_of[mb] = 1;
  } else {
    single_path(s, v);
  }
  Ctx ctx(s);
  switch (kind) {
    case ScheduleKind::kGPipe:
      gpipe(s, ctx);
      break;
    case ScheduleKind::k1F1B:
      one_f_one_b(s, ctx);
      break;
    case ScheduleKind::kInterleaved:
      interleaved(s, ctx);
      break;
    case ScheduleKind::kZbH1:
      zero_bubble(s, costs, false, ctx);
      break;
    case ScheduleKind::kZbH2:
      zero_bubble(s, costs, true, ctx);
      break;
    case ScheduleKind::kDualPipe:
      dualpipe(s, ctx);
      break;
  }
  insert_communication(s, ctx.fused);
  return s;
}

}  // namespace trillion::schedule
