// See search.h.
#include "plan/search.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "plan/units.h"

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

class Refusals {
 public:
  void add(const std::string& reason, const std::string& example) {
    Refusal& r = by_reason_[reason];
    if (r.count++ == 0) {
      r.reason = reason;
      r.example = example;
      order_.push_back(reason);
    }
  }
  std::vector<Refusal> list() const {
    std::vector<Refusal> out;
    for (const std::string& reason : order_) out.push_back(by_reason_.at(reason));
    return out;
  }
  long total() const {
    long n = 0;
    for (const auto& [k, v] : by_reason_) n += v.count;
    return n;
  }

 private:
  std::map<std::string, Refusal> by_reason_;
  std::vector<std::string> order_;
};

std::string short_layout(const Layout& l) {
  std::string s = fmt::format("tp={},pp={},cp={},ep={},dp={}", l.tp, l.pp, l.cp, l.ep, l.dp);
  if (l.pp > 1) {
    s += fmt::format(",schedule={}", schedule::schedule_kind_name(l.schedule));
    if (l.schedule == schedule::ScheduleKind::kInterleaved)
      s += fmt::format(",chunks={}", l.chunks);
  }
  s += fmt::format(",micro_batch={}", l.micro_batch);
  return s;
}

// From a split that fits (fitting_stage_layers), single layer moves that keep it fitting and keep
// every stage within the longest stage so far, taken while one shortens the step: the memory
// greedy stops at the first split that fits, which may leave the busiest rank's work higher than
// a neighbouring split's.
Layout faster_fitting_split(const ModelSpec& m, const Gpu& gpu, Layout fit, int64_t seq,
                            double batch_tokens, int micro, const Efficiency& eff) {
  const int S = static_cast<int>(fit.stage_layers.size());
  const int longest = *std::max_element(fit.stage_layers.begin(), fit.stage_layers.end());
  double best = model_step(m, gpu, fit, seq, batch_tokens, eff).step;
  for (int round = 0; round < 4; ++round) {
    Layout pick = fit;
    for (int from = 0; from < S; ++from)
      for (int to = 0; to < S; ++to) {
        const bool end = S > 1 && (from == 0 || from == S - 1);
        if (to == from || fit.stage_layers[from] <= (end ? 0 : 1) ||
            fit.stage_layers[to] >= longest)
          continue;
        Layout l = fit;
        --l.stage_layers[from], ++l.stage_layers[to];
        if (memory_per_gpu(m, l, seq, micro, gpu.overhead_bytes).total() > gpu.hbm_bytes) continue;
        const double t = model_step(m, gpu, l, seq, batch_tokens, eff, best).step;
        if (t < best) best = t, pick = l;
      }
    if (pick.stage_layers == fit.stage_layers) break;
    fit = pick;
  }
  return fit;
}

}  // namespace

std::vector<int> pipeline_depths(int64_t n_layers, int max_depth) {
  std::vector<int> out;
  for (int p = 1; p <= std::min<int64_t>(n_layers, max_depth); ++p)
    if (n_layers % p == 0 || (n_layers + 1) % p == 0 || (n_layers + 2) % p == 0) out.push_back(p);
  return out;
}

std::string explain_memory(const MemoryBreakdown& m, double hbm) {
  return fmt::format(
      "weights {}, gradients {}, optimizer {}, activations {}, temporary {}, overhead {}: {} on "
      "pipeline rank {} of {} ({} over)",
      format_bytes(m.weights), format_bytes(m.gradients), format_bytes(m.optimizer),
      format_bytes(m.activations), format_bytes(m.temporary), format_bytes(m.overhead),
      format_bytes(m.total()), m.rank, format_bytes(hbm), format_bytes(m.total() - hbm));
}

SearchResult search_layouts(const ModelSpec& m, const Gpu& gpu, long gpus, int64_t seq,
                            double batch_tokens, const SearchOptions& o) {
  const LayoutFields& f = o.fields;
  const Layout& fx = o.fixed;
  auto pick = [](bool fixed, int value, std::vector<int> all) {
    return fixed ? std::vector<int>{value} : all;
  };
  if (f.tp && (m.n_heads % fx.tp != 0 || fx.tp > gpu.nvlink_domain))
    throw Error(
        fmt::format("--layout tp={}: tensor parallelism must divide the {} attention heads "
                    "and fit the {}-GPU NVLink domain of {}",
                    fx.tp, m.n_heads, gpu.nvlink_domain, gpu.model));
  if (f.pp && fx.pp > m.n_layers)
    throw Error(fmt::format("--layout pp={}: {} has {} layers; every stage needs a whole layer",
                            fx.pp, m.name, m.n_layers));
  if (f.cp && seq % fx.cp != 0)
    throw Error(
        fmt::format("--layout cp={}: the sequence of {} tokens must split evenly", fx.cp, seq));
  std::vector<int> tps;
  for (int t = 1; t <= gpu.nvlink_domain; ++t)
    if (m.n_heads % t == 0) tps.push_back(t);
  std::vector<int> cps;
  for (int c : powers_of_two(64))
    if (seq % c == 0 && (c == 1 || seq / c >= 1024)) cps.push_back(c);
  const std::vector<int> pps = pipeline_depths(m.n_layers, 128);
  std::vector<int> eps{1};
  if (m.is_moe()) eps = powers_of_two(static_cast<int>(m.n_routed_experts));
  const long before = schedule_simulations_run();
  SearchResult result;
  Refusals refused;
  std::vector<Candidate> all;
  std::vector<double> best_times;  // the `keep` fastest step times so far, ascending
  double near_ratio = INFINITY;
  std::vector<Precision> precisions =
      f.precision ? std::vector<Precision>{fx.precision} : o.precisions;
  std::vector<Precision> usable;
  for (Precision p : precisions)
    if (gpu.peak(p) > 0) usable.push_back(p);
  if (usable.empty())
    throw Error(fmt::format("{} has no dense {} peak; use --precision with one of: {}", gpu.model,
                            precision_name(precisions.front()), gpu.precisions()));
  for (int tp : pick(f.tp, fx.tp, tps))
    for (int cp : pick(f.cp, fx.cp, cps))
      for (int pp : pick(f.pp, fx.pp, pps)) {
        const long inner = static_cast<long>(tp) * cp * pp;
        Layout base;
        base.tp = tp, base.cp = cp, base.pp = pp;
        if (gpus % inner != 0) {
          ++result.shapes;
          refused.add(fmt::format("tp x cp x pp does not divide the {} GPUs", gpus),
                      fmt::format("tp={} x cp={} x pp={} = {}", tp, cp, pp, inner));
          continue;
        }
        const int dp = static_cast<int>(gpus / inner);
        base.dp = dp;
        if (f.dp && dp != fx.dp) {
          ++result.shapes;
          refused.add("dp differs from --layout dp",
                      fmt::format("tp={},cp={},pp={} leaves dp={}", tp, cp, pp, dp));
          continue;
        }
        std::vector<ScheduleChoice> schedules;
        // Chunks per rank: at most the units per rank (layers, plus the embedding and head that
        // a balanced split may give a stage of their own), and at most 8 unless fixed (more
        // chunks only shave a bubble that is already (p - 1) / (v m)).
        std::vector<Partition> partitions{Partition::kEven};
        if (f.partition)
          partitions = {fx.partition};
        else if (pp > 1)
          partitions.push_back(Partition::kBalanced);
        int64_t most_stages = 0;
        for (Partition part : partitions)
          most_stages = std::max(most_stages, max_pipeline_stages(m, part));
        const int max_chunks = std::min<int>(8, static_cast<int>(most_stages / pp));
        if (pp == 1) {
          schedules.push_back({schedule::ScheduleKind::k1F1B, 1});
        } else if (f.schedule) {
          if (fx.schedule == schedule::ScheduleKind::kInterleaved && !f.chunks) {
            for (int v = 2; v <= max_chunks; ++v) schedules.push_back({fx.schedule, v});
            if (max_chunks < 2) {
              ++result.shapes;
              refused.add("interleaved needs 2 layers per rank",
                          fmt::format("pp={} for {} layers", pp, m.n_layers));
            }
          } else {
            schedules.push_back({fx.schedule, fx.schedule == schedule::ScheduleKind::kDualPipe ? 2
                                              : fx.schedule == schedule::ScheduleKind::kInterleaved
                                                  ? fx.chunks
                                                  : 1});
          }
        } else {
          schedules = {{schedule::ScheduleKind::k1F1B, 1},
                       {schedule::ScheduleKind::kZbH1, 1},
                       {schedule::ScheduleKind::kZbH2, 1},
                       {schedule::ScheduleKind::kDualPipe, 2}};
          if (f.chunks)
            schedules.push_back({schedule::ScheduleKind::kInterleaved, fx.chunks});
          else
            for (int v = 2; v <= max_chunks; ++v)
              schedules.push_back({schedule::ScheduleKind::kInterleaved, v});
        }
        for (int ep : pick(f.ep, fx.ep, eps)) {
          if ((static_cast<long>(dp) * cp) % ep != 0 ||
              (m.is_moe() && m.n_routed_experts % ep != 0)) {
            ++result.shapes;
            refused.add("ep does not divide dp x cp or the experts",
                        fmt::format("ep={} with dp={} x cp={}", ep, dp, cp));
            continue;
          }
          for (int mb : pick(f.micro_batch, fx.micro_batch, {1, 2, 4}))
            for (const ScheduleChoice& sc : schedules)
              for (Partition part : partitions)
                for (Precision prec : usable) {
                  Layout l = base;
                  l.ep = ep, l.micro_batch = mb, l.schedule = sc.kind, l.chunks = sc.chunks;
                  l.precision = prec, l.partition = part;
                  if (part == Partition::kExplicit) l.stage_layers = fx.stage_layers;
                  l.sp = f.sp ? fx.sp : true;
                  if (f.grad) l.grad_bytes = fx.grad_bytes;
                  l.allocation = fx.allocation;  // how the framework allocates: never searched
                  // The FP8 activation cache follows the precision unless fixed; an EMA is the
                  // user's choice (none unless asked for).
                  l.activation_cache = f.act ? fx.activation_cache : ActivationCache::kAuto;
                  l.ema = fx.ema;
                  l.cp_all_gather = fx.cp_all_gather, l.blocking_p2p = fx.blocking_p2p;
                  const int micro = microbatches_for(l, seq, batch_tokens);
                  // A layout that fits: timed when it can still enter the top `keep`.
                  auto time_fitting = [&](const Layout& fit) {
                    ++result.fitting;
                    const double bar =
                        static_cast<int>(best_times.size()) < o.keep ? INFINITY : best_times.back();
                    StepBreakdown sb =
                        model_step(m, gpu, fit, seq, batch_tokens, o.efficiency, bar);
                    if (sb.step < bar) {
                      best_times.insert(
                          std::upper_bound(best_times.begin(), best_times.end(), sb.step), sb.step);
                      if (static_cast<int>(best_times.size()) > o.keep) best_times.pop_back();
                      all.push_back({fit, std::move(sb)});
                    }
                  };
                  auto refuse = [&](const std::string& reason, const std::string& why) {
                    ++result.shapes;
                    refused.add(reason, short_layout(l) + ": " + why);
                  };
                  if (l.activation_cache == ActivationCache::kFp8 && prec != Precision::kFp8 &&
                      prec != Precision::kFp4) {
                    refuse("act=fp8 caches the inputs of FP8 GEMMs: it needs precision fp8 or fp4",
                           precision_name(prec));
                    continue;
                  }
                  if (micro == 0) {
                    refuse("the batch does not split into dp x whole micro-batches",
                           fmt::format("{:.0f} sequences / (dp={} x micro_batch={})",
                                       batch_tokens / seq, dp, mb));
                    continue;
                  }
                  if (pp > 1 && sc.kind == schedule::ScheduleKind::kInterleaved &&
                      micro % pp != 0) {
                    refuse("interleaved needs micro-batches a multiple of pp",
                           fmt::format("{} micro-batches, pp={}", micro, pp));
                    continue;
                  }
                  if (pp > 1 && sc.kind == schedule::ScheduleKind::kDualPipe &&
                      (pp % 2 != 0 || micro % 2 != 0 || micro < 2 * pp)) {
                    refuse("dualpipe needs an even pp and an even count >= 2 pp of micro-batches",
                           fmt::format("{} micro-batches, pp={}", micro, pp));
                    continue;
                  }
                  const int64_t stages = pp > 1 && sc.kind == schedule::ScheduleKind::kInterleaved
                                             ? int64_t{pp} * sc.chunks
                                             : pp;
                  if (stages > max_pipeline_stages(m, part)) {
                    refuse("more pipeline stages than whole layers (and embedding and head)",
                           fmt::format("pp={} x chunks={} = {} stages for {} layers, {} split", pp,
                                       sc.chunks, stages, m.n_layers, partition_name(part)));
                    continue;
                  }
                  if (part == Partition::kExplicit &&
                      static_cast<int64_t>(l.stage_layers.size()) != stages) {
                    refuse("--layout partition names another number of stages",
                           fmt::format("partition={} has {} stages; pp={} x chunks={} has {}",
                                       l.partition_text(), l.stage_layers.size(), pp, sc.chunks,
                                       stages));
                    continue;
                  }
                  // The schedule is played with up to steady_state_microbatches(pp) of them:
                  // its size, stages x micro-batches, is bounded so one simulation stays well
                  // under a second (only a deep model on many stages reaches the bound).
                  const int64_t played =
                      int64_t{pp} * sc.chunks * std::min(micro, steady_state_microbatches(pp));
                  if (pp > 1 && played > kMaxScheduleSize) {
                    refuse(fmt::format("a pipeline schedule above {} stage x micro-batch pairs "
                                       "is not simulated",
                                       kMaxScheduleSize),
                           fmt::format("pp={} x chunks={} x {} micro-batches played = {}", pp,
                                       sc.chunks, std::min(micro, steady_state_microbatches(pp)),
                                       played));
                    continue;
                  }
                  if (part == Partition::kBalanced && pp > 1 && stages <= m.n_layers) {
                    // Skip the balanced split where it equals the even one.
                    const PipelineShape balanced = pipeline_shape(m, l);
                    Layout le = l;
                    le.partition = Partition::kEven;
                    if (pipeline_shape(m, le).stage_layers == balanced.stage_layers) continue;
                  }
                  // Every recompute policy and ZeRO stage that fits is timed: less recompute
                  // with more sharding can beat more recompute with less (ZeRO-3's gathers).
                  // DeepSeek-V3's norm-up policy is searched for MLA models (it recomputes
                  // their up-projections); any model takes it when --layout fixes it.
                  for (RecomputePolicy rc : {RecomputePolicy::kNone, RecomputePolicy::kNormUp,
                                             RecomputePolicy::kSelective, RecomputePolicy::kFull}) {
                    if (f.recompute && rc != fx.recompute_policy()) continue;
                    if (!f.recompute && rc == RecomputePolicy::kNormUp && !m.is_mla()) continue;
                    // BF16 Adam moments (DeepSeek-V3 §3.3.3) only where FP32 ones do not fit.
                    std::vector<std::pair<int, int>> states;  // (ZeRO stage, moment bytes)
                    for (int zero : f.zero ? std::vector<int>{fx.zero} : std::vector<int>{1, 2, 3})
                      for (int moments :
                           f.moments ? std::vector<int>{fx.moment_bytes} : std::vector<int>{4, 2})
                        states.emplace_back(zero, moments);
                    for (const auto& [zero, moments] : states) {
                      ++result.shapes;
                      l.norm_up = rc == RecomputePolicy::kNormUp;
                      l.recompute = rc == RecomputePolicy::kSelective ? Recompute::kSelective
                                    : rc == RecomputePolicy::kFull    ? Recompute::kFull
                                                                      : Recompute::kNone;
                      l.zero = zero, l.moment_bytes = moments;
                      if (o.engine_refusal) {
                        const std::string why = o.engine_refusal(l);
                        if (!why.empty()) {
                          refused.add("the engine refuses it (its own checks of the run config)",
                                      l.to_string() + ": " + why);
                          continue;
                        }
                      }
                      const MemoryBreakdown mem =
                          memory_per_gpu(m, l, seq, micro, gpu.overhead_bytes);
                      if (mem.total() > gpu.hbm_bytes && pp > 1 && !f.partition &&
                          part == Partition::kEven && mem.total() < 1.25 * gpu.hbm_bytes) {
                        // Neither split fits, but one that moves layers off the fullest rank
                        // may (plan/memory.h); it is timed as its own layout.
                        Layout lf = l;
                        lf.stage_layers = fitting_stage_layers(m, l, seq, micro, gpu.overhead_bytes,
                                                               gpu.hbm_bytes);
                        if (!lf.stage_layers.empty()) {
                          lf.partition = Partition::kExplicit;
                          ++result.shapes;
                          time_fitting(faster_fitting_split(m, gpu, lf, seq, batch_tokens, micro,
                                                            o.efficiency));
                        }
                      }
                      if (mem.total() > gpu.hbm_bytes) {
                        refused.add(
                            fmt::format("does not fit in {} per GPU", format_bytes(gpu.hbm_bytes)),
                            l.to_string() + ": " + format_bytes(mem.total()));
                        const double ratio = mem.total() / gpu.hbm_bytes;
                        if (ratio < near_ratio) {
                          near_ratio = ratio;
                          result.has_near_miss = true;
                          result.near_miss = l;
                          result.near_miss_memory = mem;
                        }
                        continue;
                      }
                      time_fitting(l);
                      // A higher ZeRO stage only adds communication once this one fits (and BF16
                      // moments are taken only where FP32 ones do not fit).
                      break;
                    }
                  }
                }
        }
      }
  result.simulations = schedule_simulations_run() - before;
  result.refusals = refused.list();
  if (all.empty()) {
    std::string why;
    for (const Refusal& r : result.refusals)
      why += fmt::format("\n  {} layout(s): {} (e.g. {})", r.count, r.reason, r.example);
    if (result.has_near_miss)
      why += fmt::format(
          "\nThe closest layout, {}, needs {}.\nTo fit: more GPUs, a GPU with more memory, a "
          "shorter --seq, a smaller --batch-tokens, or fix fewer --layout fields (recompute, "
          "zero, pp) so the search can use them.",
          result.near_miss.to_string(), explain_memory(result.near_miss_memory, gpu.hbm_bytes));
    throw Error(
        fmt::format("no layout of {} on {} x {} with {:.0f} sequences of {} per step can "
                    "run: {} layouts refused:{}",
                    m.name, gpus, gpu.model, batch_tokens / seq, seq, result.shapes, why));
  }
  std::sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    if (a.step.step != b.step.step) return a.step.step < b.step.step;
    return a.step.memory.total() < b.step.memory.total();
  });
  if (static_cast<int>(all.size()) > o.keep) all.resize(o.keep);
  result.ranked = std::move(all);
  return result;
}

}  // namespace trillion::plan
