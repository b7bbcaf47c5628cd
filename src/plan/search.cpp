// See search.h.
#include "plan/search.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace trillion::plan {
namespace {

std::vector<int> powers_of_two(int max) {
  std::vector<int> v;
  for (int x = 1; x <= max; x *= 2) v.push_back(x);
  return v;
}

struct ScheduleChoice {
  schedule::ScheduleKind kind;
  int chunks;
};

}  // namespace

SearchResult search_layouts(const ModelSpec& m, const Gpu& gpu, long gpus, int64_t seq,
                            double batch_tokens, const SearchOptions& o) {
  const LayoutFields& f = o.fields;
  const Layout& fx = o.fixed;
  auto pick = [](bool fixed, int value, std::vector<int> all) {
    return fixed ? std::vector<int>{value} : all;
  };
  std::vector<int> tps;
  for (int t : powers_of_two(std::min(gpu.nvlink_domain, 64)))
    if (m.n_heads % t == 0 && t <= 16) tps.push_back(t);
  std::vector<int> cps;
  for (int c : powers_of_two(32))
    if (seq % c == 0 && seq / c >= 2048) cps.push_back(c);
  std::vector<int> pps;
  for (int p : powers_of_two(128))
    if (p <= m.n_layers) pps.push_back(p);
  std::vector<int> eps{1};
  if (m.is_moe()) eps = powers_of_two(static_cast<int>(m.n_routed_experts));
  const long before = schedule_simulations_run();
  SearchResult result;
  std::vector<Candidate> all;
  std::vector<double> best_times;  // the `keep` fastest step times so far, ascending
  const std::vector<Precision> precisions =
      f.precision ? std::vector<Precision>{fx.precision} : o.precisions;
  if (f.tp && (m.n_heads % fx.tp != 0 || fx.tp > gpu.nvlink_domain))
    throw Error(
        fmt::format("--layout tp={}: tensor parallelism must divide the {} attention heads "
                    "and fit the {}-GPU NVLink domain of {}",
                    fx.tp, m.n_heads, gpu.nvlink_domain, gpu.model));
  for (int tp : pick(f.tp, fx.tp, tps))
    for (int cp : pick(f.cp, fx.cp, cps))
      for (int pp : pick(f.pp, fx.pp, pps)) {
        const long inner = static_cast<long>(tp) * cp * pp;
        if (gpus % inner != 0) continue;
        const int dp = static_cast<int>(gpus / inner);
        if (f.dp && dp != fx.dp) continue;
        std::vector<ScheduleChoice> schedules;
        if (pp == 1) {
          schedules.push_back({schedule::ScheduleKind::k1F1B, 1});
        } else if (f.schedule) {
          if (fx.schedule == schedule::ScheduleKind::kInterleaved && !f.chunks)
            for (int v : {2, 4, 8}) schedules.push_back({fx.schedule, v});
          else
            schedules.push_back(
                {fx.schedule, fx.schedule == schedule::ScheduleKind::kDualPipe ? 2 : fx.chunks});
        } else {
          schedules = {{schedule::ScheduleKind::k1F1B, 1},
                       {schedule::ScheduleKind::kZbH1, 1},
                       {schedule::ScheduleKind::kZbH2, 1},
                       {schedule::ScheduleKind::kDualPipe, 2}};
          for (int v : {2, 4, 8})
            if (!f.chunks || fx.chunks == v)
              schedules.push_back({schedule::ScheduleKind::kInterleaved, v});
        }
        for (int ep : pick(f.ep, fx.ep, eps)) {
          if ((static_cast<long>(dp) * cp) % ep != 0) continue;
          for (int mb : pick(f.micro_batch, fx.micro_batch, {1, 2, 4}))
            for (const ScheduleChoice& sc : schedules)
              for (Precision prec : precisions) {
                if (gpu.peak(prec) <= 0) continue;
                Layout l;
                l.tp = tp, l.cp = cp, l.pp = pp, l.dp = dp, l.ep = ep, l.micro_batch = mb;
                l.schedule = sc.kind, l.chunks = sc.chunks, l.precision = prec;
                const int micro = microbatches_for(l, seq, batch_tokens);
                if (micro == 0) continue;
                if (pp > 1 && sc.kind == schedule::ScheduleKind::kInterleaved &&
                    (micro % pp != 0 || stage_shape(m, l).layers_per_rank < sc.chunks))
                  continue;
                if (pp > 1 && sc.kind == schedule::ScheduleKind::kDualPipe &&
                    (pp % 2 != 0 || micro % 2 != 0 || micro < 2 * pp))
                  continue;
                // The cheapest recompute policy, then the cheapest ZeRO stage, that fits.
                bool placed = false;
                for (Recompute rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
                  if (f.recompute && rc != fx.recompute) continue;
                  for (int zero : f.zero ? std::vector<int>{fx.zero} : std::vector<int>{1, 2, 3}) {
                    ++result.shapes;
                    l.recompute = rc, l.zero = zero;
                    const MemoryBreakdown mem = memory_per_gpu(m, l, seq, micro);
                    if (mem.total() > gpu.hbm_bytes) continue;
                    ++result.fitting;
                    // Only a layout that can still enter the top `keep` is simulated.
                    const double bar =
                        static_cast<int>(best_times.size()) < o.keep ? INFINITY : best_times.back();
                    StepBreakdown sb = model_step(m, gpu, l, seq, batch_tokens, o.efficiency, bar);
                    if (sb.step < bar) {
                      best_times.insert(
                          std::upper_bound(best_times.begin(), best_times.end(), sb.step), sb.step);
                      if (static_cast<int>(best_times.size()) > o.keep) best_times.pop_back();
                      all.push_back({l, std::move(sb)});
                    }
                    placed = true;
                    break;
                  }
                  if (placed) break;
                }
              }
        }
      }
  result.simulations = schedule_simulations_run() - before;
  if (result.shapes == 0)
    throw Error(fmt::format(
        "no layout of {} on {} GPUs matches the --layout fields with a batch of {:.0f} sequences "
        "of {}: "
        "tp*pp*cp*dp must equal the GPU count, tp must divide the {} heads and fit the NVLink "
        "domain, the sequences must split into dp x whole micro-batches, interleaved needs the "
        "micro-batch count to be a multiple of pp, dualpipe an even pp and at least 2 x pp even "
        "micro-batches",
        m.name, gpus, batch_tokens / seq, seq, m.n_heads));
  if (all.empty())
    throw Error(fmt::format(
        "no layout of {} on {} x {} fits in {:.0f} GB per GPU (searched {} layouts); use more "
        "GPUs, a GPU with more memory, a shorter --seq or a smaller --batch-tokens",
        m.name, gpus, gpu.model, gpu.hbm_bytes / 1e9, result.shapes));
  std::sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    if (a.step.step != b.step.step) return a.step.step < b.step.step;
    return a.step.memory.total() < b.step.memory.total();
  });
  if (static_cast<int>(all.size()) > o.keep) all.resize(o.keep);
  result.ranked = std::move(all);
  return result;
}

}  // namespace trillion::plan
