// See step_layout.h.
#include "train/step_layout.h"

#include <fmt/format.h>

#include "core/error.h"
#include "model/local_shape.h"
#include "model/sequence_split.h"
#include "schedule/generators.h"

namespace trillion {

AdamWConfig adamw_config(const OptimConfig& o) {
  return {o.beta1, o.beta2, o.eps, o.weight_decay};
}

LrSchedule lr_schedule_of(const RunConfig& c) {
  LrSchedule s;
  s.kind = parse_lr_schedule(c.optim.schedule);
  s.peak_lr = c.optim.lr;
  s.min_lr = c.optim.min_lr;
  s.warmup_steps = c.optim.warmup_steps;
  s.total_steps = std::max<int64_t>(1, c.train.steps);
  s.decay_fraction = c.optim.decay_fraction;
  return s;
}

comm::Communicator& checked_group(comm::Communicator& g, int64_t degree, const char* key) {
  if (g.size() != degree) {
    throw Error(
        fmt::format("parallel.{} = {} but the {} group has {} process(es); start "
                    "pp*dp*cp*tp processes (trillion launch -n N -- train ...)",
                    key, degree, key, g.size()));
  }
  return g;
}

bool experts_over_tp(const RunConfig& c) {
  return c.model.moe.enabled() && c.parallel.tp > 1 && c.parallel.expert_tp == 1;
}

bool experts_split_over_tp(const RunConfig& c) {
  return c.model.moe.enabled() && c.parallel.tp > 1 && c.parallel.expert_tp == c.parallel.tp;
}

namespace {

// MoE x tensor parallelism: how the experts use the tp ranks (parallel.expert_tp).
void check_moe_tensor_parallel(const RunConfig& c) {
  const ParallelConfig& p = c.parallel;
  const MoeConfig& moe = c.model.moe;
  if (p.expert_tp != 1 && (!moe.enabled() || p.expert_tp != p.tp)) {
    throw Error(fmt::format(
        "parallel.expert_tp = {}: expected 1 (whole experts on each tp rank) or parallel.tp = {} "
        "(every expert split over tp){}",
        p.expert_tp, p.tp, moe.enabled() ? "" : "; it applies to MoE models only"));
  }
  if (!experts_over_tp(c) && !experts_split_over_tp(c)) return;
  if (!p.sp) {
    throw Error(fmt::format(
        "parallel.tp = {} with parallel.sp = false and MoE layers: the MoE layers run on "
        "sequence-parallel rows (their router's gradient is summed over tp with the norms'); "
        "set parallel.sp = true",
        p.tp));
  }
  if (experts_over_tp(c) && moe.n_routed_experts % (p.tp * p.ep) != 0) {
    throw Error(fmt::format(
        "parallel.tp x parallel.ep = {} x {} does not divide model.n_routed_experts = {} "
        "(with parallel.expert_tp = 1 each of the tp x ep ranks holds whole experts); lower "
        "ep, or set parallel.expert_tp = {} to split every expert over tp",
        p.tp, p.ep, moe.n_routed_experts, p.tp));
  }
  if (experts_split_over_tp(c) && moe.expert_ffn % p.tp != 0) {
    throw Error(fmt::format(
        "parallel.expert_tp = {} does not divide model.expert_ffn = {} (every expert's width is "
        "split over tp); set parallel.expert_tp = 1 to keep whole experts on each tp rank",
        p.expert_tp, moe.expert_ffn));
  }
}

// Full recompute of MoE layers reruns the layer, routing and both all-to-alls, in the backward
// pass (model/moe.h Moe::recompute).
void check_moe_full_recompute(const RunConfig& c) {
  if (!c.model.moe.enabled() || c.model.recompute != plan::Recompute::kFull) return;
  const ParallelConfig& p = c.parallel;
  if (p.tp > 1) {
    // Under tp a MoE layer's routed rows are split over tp x ep (or each expert over tp) and its
    // output is reduce-scattered as it is computed: a rerun would write the layer's output, which
    // the next layer still holds as its input.
    throw Error(fmt::format(
        "model.recompute = full with MoE layers and parallel.tp = {}: the tp MoE paths write the "
        "layer's output while they compute it, and the next layer holds that output as its "
        "input; use parallel.tp = 1 (dp, ep, cp, pp work) or recompute = selective",
        p.tp));
  }
  const schedule::ScheduleKind kind = schedule::parse_schedule_kind(p.schedule);
  const bool deferred_w =
      p.split_backward || (p.pp > 1 && (kind == schedule::ScheduleKind::kZbH1 ||
                                        kind == schedule::ScheduleKind::kZbH2 ||
                                        kind == schedule::ScheduleKind::kDualPipe));
  if (deferred_w) {
    // A W pass deferred past other layers' recomputation finds the shared recompute buffer
    // overwritten: it would rerun the routing and the expert exchange a third time per
    // micro-batch (or keep the rows, which is what full recompute frees).
    throw Error(fmt::format(
        "model.recompute = full with MoE layers and parallel.schedule = {}{}: a deferred W pass "
        "would rerun the MoE layer's routing and expert exchange a third time per micro-batch; "
        "use 1f1b, gpipe or interleaved, or recompute = selective",
        p.schedule, p.split_backward ? " (split_backward)" : ""));
  }
}

}  // namespace

const RunConfig& checked_layout(const RunConfig& c) {
  check_moe_tensor_parallel(c);
  check_moe_full_recompute(c);
  if (c.parallel.ep > 1 && !c.model.moe.enabled()) {
    throw Error(
        fmt::format("parallel.ep = {}: expert parallelism needs a MoE model "
                    "(model.n_routed_experts > 0)",
                    c.parallel.ep));
  }
  if (c.parallel.ep > 1 && c.model.moe.n_routed_experts % c.parallel.ep != 0) {
    throw Error(fmt::format("parallel.ep = {} does not divide model.n_routed_experts = {}",
                            c.parallel.ep, c.model.moe.n_routed_experts));
  }
  // A tied head or MTP modules on a rank without the embedding read a copy of the table, under
  // any ZeRO stage and recipe (parallel/pipeline/tied_embedding.h); MTP modules run under SP and
  // cp too (model/mtp.h).
  return c;
}

ParallelContext context_of(const RunConfig& c, int dp, comm::Communicator& tp,
                           comm::Communicator& cp) {
  const ShardDegrees degrees{tp.size(), cp.size(), 1};
  ParallelContext ctx;
  ctx.shape = local_shape(c.model, c.train.micro_batch / dp, c.model.seq_len, degrees);
  ctx.degrees = degrees;
  ctx.shard = ShardCoord{tp.size(), tp.rank(), 1, 0, experts_split_over_tp(c)};
  if (tp.size() > 1) {
    ctx.tp = &tp;
    ctx.sp = c.parallel.sp;
    ctx.moe_slice = experts_over_tp(c);
    ctx.experts_tp = experts_split_over_tp(c);
  }
  ctx.sequence = {cp.size(), parse_cp_split(c.parallel.cp_split, "parallel.cp_split")};
  ctx.cp_rank = cp.rank();
  if (cp.size() > 1) ctx.cp = &cp;
  return ctx;
}

schedule::Schedule schedule_of(const RunConfig& c) {
  const schedule::ScheduleKind kind = schedule::parse_schedule_kind(c.parallel.schedule);
  const int p = static_cast<int>(c.parallel.pp), m = static_cast<int>(c.train.grad_accum);
  int v = static_cast<int>(c.parallel.chunks);
  if (kind == schedule::ScheduleKind::kDualPipe) {
    if (v != 1 && v != 2) {
      throw Error(
          fmt::format("parallel.chunks = {}: dualpipe holds 2 chunks per rank (its two "
                      "model copies); leave chunks unset",
                      v));
    }
    v = 2;
  } else if (kind != schedule::ScheduleKind::kInterleaved && v != 1) {
    throw Error(
        fmt::format("parallel.chunks = {} needs parallel.schedule = \"interleaved\" "
                    "(the {} schedule runs one chunk per rank)",
                    v, c.parallel.schedule));
  }
  schedule::Schedule s;
  try {
    s = schedule::generate_schedule(kind, p, m, v);
  } catch (const Error& e) {
    throw Error(
        fmt::format("parallel.schedule = \"{}\" with parallel.pp = {} and "
                    "train.grad_accum = {} micro-batches per step: {}",
                    c.parallel.schedule, p, m, e.what()));
  }
  const int stages = s.num_stages(0);
  if (stages > c.model.n_layers) {
    throw Error(
        fmt::format("parallel.pp = {} x {} chunk(s) = {} stages for model.n_layers = {}: "
                    "every stage needs a whole layer; lower pp or chunks",
                    p, s.num_chunks / (kind == schedule::ScheduleKind::kDualPipe ? 2 : 1), stages,
                    c.model.n_layers));
  }
  try {
    plan::engine_partition(c.model.n_layers, stages, c.parallel.stage_layers());
  } catch (const Error& e) {
    throw Error(fmt::format("parallel.partition = \"{}\" for model.n_layers = {}: {}",
                            c.parallel.partition, c.model.n_layers, e.what()));
  }
  return s;
}

schedule::Schedule forward_only(const schedule::Schedule& train) {
  schedule::Schedule s;
  s.kind = train.kind;
  s.num_ranks = train.num_ranks;
  s.num_microbatches = 1;
  s.num_chunks = train.num_chunks;
  s.chunk_fraction = train.chunk_fraction;
  s.paths = {train.paths[0]};
  s.path_of = {0};
  s.actions.assign(s.num_ranks, {});
  using K = schedule::ActionKind;
  const auto& path = s.paths[0];
  for (int st = 0; st < static_cast<int>(path.size()); ++st) {
    const schedule::Placement& at = path[st];
    schedule::Action f{at.rank, K::kForward, 0, at.chunk, st};
    if (st > 0 && path[st - 1].rank != at.rank) {
      schedule::Action r = f;
      r.kind = K::kRecvF;
      s.actions[at.rank].push_back(r);
    }
    s.actions[at.rank].push_back(f);
    if (st + 1 < static_cast<int>(path.size()) && path[st + 1].rank != at.rank) {
      schedule::Action snd = f;
      snd.kind = K::kSendF;
      s.actions[at.rank].push_back(snd);
    }
  }
  return s;
}

bool RankStages::holds(int unit) const {
  for (int s : stage_of_chunk) {
    if (unit >= partition[s].first_unit && unit <= partition[s].last_unit) return true;
  }
  return false;
}

RankStages rank_stages(const schedule::Schedule& s, int64_t n_layers,
                       const std::vector<int>& stage_layers, int rank) {
  RankStages r{plan::engine_partition(n_layers, s.num_stages(0), stage_layers),
               std::vector<int>(s.num_chunks, -1)};
  for (const auto& path : s.paths) {
    for (int st = 0; st < static_cast<int>(path.size()); ++st) {
      if (path[st].rank == rank) r.stage_of_chunk[path[st].chunk] = st;
    }
  }
  return r;
}

parallel::DataParallelOptions parallel_options(const RunConfig& c) {
  const double elem = static_cast<double>(dtype_size(c.model.dtype));
  return {static_cast<int>(c.parallel.zero),
          static_cast<int64_t>(c.parallel.bucket_mb * 1e6 / elem),
          c.parallel.overlap,
          c.train.grad_accum,
          {},
          {},
          0};
}

}  // namespace trillion
