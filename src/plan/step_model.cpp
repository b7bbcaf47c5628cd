// See step_model.h.
#include "plan/step_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "core/error.h"
#include "plan/context_ring.h"
#include "plan/efficiency.h"
#include "plan/parameter_table.h"
#include "schedule/generators.h"
#include "schedule/simulator.h"

namespace trillion::plan {
namespace {

long g_simulations = 0;

// Bubble fraction (idle over total, all ranks) of a schedule from the simulator, cached by
// (kind, p, m, v, B/F, W/F, comm/F) with the ratios rounded (B, W to 0.05 F, comm to 0.005 F) so
// that the search reuses simulations across layouts with near-identical cost shapes.
double played_bubble(schedule::ScheduleKind kind, int p, int m, int v, long bq, long wq, long cq) {
  using Key = std::tuple<int, int, int, int, long, long, long>;
  static std::map<Key, double> cache;
  const Key key{static_cast<int>(kind), p, m, v, bq, wq, cq};
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const schedule::OpCosts costs{1.0, bq / 20.0, wq / 20.0, cq / 200.0};
  const schedule::Schedule s = schedule::generate_schedule(kind, p, m, v, costs);
  const double bubble = schedule::simulate(s, costs, false).bubble_fraction;
  ++g_simulations;
  cache.emplace(key, bubble);
  return bubble;
}

// The bubble of m micro-batches. Up to steady_state_microbatches(p) the schedule is played as
// it is; beyond, a rank's idle time is a straight line in m (the ramp-up and ramp-down, plus
// what communication or unequal F/B/W stall in every steady-state round), so the line through
// two played counts is extended to m. A simulation's size is thus bounded by p and v, never by
// the batch (--seq 1 gives millions of micro-batches).
double simulated_bubble(schedule::ScheduleKind kind, int p, int m, int v, double b_over_f,
                        double w_over_f, double c_over_f) {
  const long bq = std::max(1L, std::lround(b_over_f * 20)), wq = std::lround(w_over_f * 20),
             cq = std::lround(c_over_f * 200);
  const int m2 = steady_state_microbatches(p), m1 = m2 / 2;
  if (m <= m2) return played_bubble(kind, p, m, v, bq, wq, cq);
  const double work = 1 + bq / 20.0 + wq / 20.0;  // one micro-batch's F + B + W, in F
  auto idle = [&](int count) {
    const double b = played_bubble(kind, p, count, v, bq, wq, cq);
    return count * work * b / (1 - b);
  };
  const double i1 = idle(m1), i2 = idle(m2);
  const double at_m = i2 + std::max(0.0, (i2 - i1) / (m2 - m1)) * (m - m2);
  return at_m / (at_m + m * work);
}

// One layer's (or the head's) cost for one micro-batch on one GPU.
struct PassCost {
  double f = 0, b = 0, w = 0;     // forward, input gradient (with recompute), weight gradient
  double recompute = 0;           // part of b
  double tp = 0, cp = 0, ep = 0;  // exposed communication inside f + b
  void add_gemm(const GemmPasses& g) {
    f += g.forward, b += g.backward_input, w += g.backward_weight;
  }
};

struct Context {
  const ModelSpec& m;
  const Gpu& gpu;
  const Layout& l;
  const Efficiency& eff;
  int64_t seq;
  double tokens;  // per micro-batch per GPU (after CP)
  double e;       // GEMM operand bytes
  Precision p;
};

// Columns of a tensor-parallel matrix on one rank: split when it divides, else replicated.
double split(double features, int tp) {
  return std::fmod(features, tp) == 0 ? features / tp : features;
}

PassCost layer_cost(const Context& c, bool moe) {
  const ModelSpec& m = c.m;
  const Layout& l = c.l;
  const Gpu& gpu = c.gpu;
  const int t = l.tp;
  const double T = c.tokens, h = static_cast<double>(m.d_model),
               nh = static_cast<double>(m.n_heads);
  PassCost r;
  auto linear = [&](double out, double in) {
    r.add_gemm(linear_seconds(gpu, c.p, T, out, in, c.e));
  };
  // Attention projections (Megatron's column/row split, plan/parameter_table.h).
  double up_projections = 0;  // MLA's up-projection forwards (what norm-up and selective replay)
  if (m.is_mla()) {
    if (m.q_lora_rank > 0) {
      linear(static_cast<double>(m.q_lora_rank), h);  // replicated down projection
      const double down = r.f;
      linear(split(nh * m.qk_dim(), t), static_cast<double>(m.q_lora_rank));
      up_projections += r.f - down;
    } else {
      linear(split(nh * m.qk_dim(), t), h);
    }
    linear(static_cast<double>(m.kv_lora_rank + m.qk_rope_dim), h);
    const double down = r.f;
    linear(split(nh * (m.qk_nope_dim + m.v_head_dim), t), static_cast<double>(m.kv_lora_rank));
    up_projections += r.f - down;
  } else {
    linear(split(nh * m.head_dim, t) + 2 * split(static_cast<double>(m.n_kv_heads * m.head_dim), t),
           h);
  }
  linear(h, split(nh * m.v_dim(), t));
  // MLP or experts.
  if (!moe) {
    const double f = split(static_cast<double>(m.ffn_hidden), t);
    linear(m.mlp == MlpKind::kSwiGlu ? 2 * f : f, h);
    linear(h, f);
  } else {
    linear(static_cast<double>(m.n_routed_experts), h);  // router
    if (m.n_shared_experts > 0) {
      const double fs = split(static_cast<double>(m.n_shared_experts * m.expert_ffn), t);
      linear(2 * fs, h);
      linear(h, fs);
    }
    // Routed experts: E/ep local experts, each with its share of the top-k copies (balanced
    // routing): a grouped GEMM of many small M.
    const double local_experts = static_cast<double>(m.n_routed_experts) / l.ep;
    const double per_expert =
        std::max(1.0, T * m.top_k * l.ep / static_cast<double>(m.n_routed_experts));
    const double fe = split(static_cast<double>(m.expert_ffn), t);
    auto grouped = [&](double out, double in) {
      r.f += gemm_seconds(gpu, c.p, per_expert, out, in, local_experts, c.e);
      r.b += gemm_seconds(gpu, c.p, per_expert, in, out, local_experts, c.e);
      r.w += gemm_seconds(gpu, c.p, out, in, per_expert, local_experts, c.e);
    };
    grouped(2 * fe, h);
    grouped(h, fe);
  }
  // Attention core.
  const double heads = split(nh, t);
  double core_forward = 0, core_backward = 0;
  if (m.attention_kernel == AttentionKernel::kFlash) {
    const double flops =
        T * attention_flops_per_token_layer(m, c.seq, AttentionFlops::kCausal) / 3 / t;
    core_forward = flash_attention_forward_seconds(gpu, flops, static_cast<double>(c.seq) / l.cp);
    core_backward = kFlashBackwardRatio * core_forward;
    r.f += core_forward;
    r.b += core_backward;
  } else {
    // Scores Q K^T and P V as batched GEMMs over (micro-batch x heads), full square (Megatron
    // computes every score and masks); backward runs four GEMMs of the same shapes.
    const double s = static_cast<double>(c.seq), q = s / l.cp, batch = l.micro_batch * heads;
    const double e16 = 2.0;  // scores stay 16-bit
    core_forward =
        gemm_seconds(gpu, Precision::kBf16, q, s, static_cast<double>(m.qk_dim()), batch, e16) +
        gemm_seconds(gpu, Precision::kBf16, q, static_cast<double>(m.v_dim()), s, batch, e16);
    core_backward = 2 * core_forward;
    r.f += core_forward;
    r.b += core_backward;
  }
  // Elementwise work: the layer's stored activations pass through HBM (1 pass forward, the rest
  // backward); recomputation replays the forward's share.
  const ActivationOptions opt{2.0, 4.0};
  const std::vector<ActivationTerm> terms = block_terms(m, moe, static_cast<double>(c.seq), opt);
  const bool sp = l.sequence_parallel();
  const double bytes = T * layer_bytes_per_token(terms, t, sp, Recompute::kNone, 0);
  const double elem = memory_seconds(gpu, bytes);
  r.f += elem;
  r.b += (c.eff.elementwise_passes - 1) * elem;
  const double gemm_forward = r.f - core_forward - elem;

  // TP: per layer 2 all-reduces forward and 2 backward of the [tokens, h] activation, or with SP
  // 2 all-gathers + 2 reduce-scatters each way (same bytes; Korthikanti §4.2.2).
  const double act = T * h * 2.0;
  double tp_forward = 0;
  if (t > 1) {
    const LinkCost link = link_cost(gpu, link_of(gpu, t));
    tp_forward = sp ? 2 * (all_gather_seconds(link, act, t) + reduce_scatter_seconds(link, act, t))
                    : 2 * all_reduce_seconds(link, act, t);
    tp_forward *= 1 - c.eff.tp_overlap;
  }
  // CP: the engine's ring (plan/context_ring.h): (cp - 1) K/V hops forward, (2 cp - 1) K/V and
  // dK/dV hops backward (MLA: of the cheaper of per-head K/V and the latent), each hidden behind
  // one ring step's block kernels where they last long enough; or, as Llama 3 §3.3.2 runs it,
  // all-gather K and V forward and reduce-scatter dK, dV backward, exposed.
  double cp_forward = 0, cp_backward = 0;
  if (l.cp > 1) {
    const LinkCost link = link_cost(gpu, link_of(gpu, static_cast<long>(t) * l.cp));
    const bool all_gather = c.eff.cp_all_gather || l.cp_all_gather;  // of per-head K/V
    const double block = static_cast<double>(context_ring_block_bytes(
        m, l.micro_batch, c.seq, 2, {t, sp, l.cp}, all_gather ? CpMla::heads : CpMla::automatic));
    if (all_gather) {
      cp_forward = cp_backward = all_gather_seconds(link, block * l.cp, l.cp);
    } else {
      const RingSeconds ring =
          context_ring_exposed_seconds(l.cp, block, link, core_forward, core_backward);
      cp_forward = ring.forward, cp_backward = ring.backward;
      // MLA's latent ring (the cheaper one, plan/context_ring.h) re-runs the Wkv_b up-projection
      // of every remote block: forward, and backward with its dgrad and wgrad.
      if (context_ring_latent(m, {t, sp, l.cp})) {
        const double remote = static_cast<double>(l.cp - 1),
                     heads_out = split(nh, t) * static_cast<double>(m.qk_nope_dim + m.v_head_dim),
                     dc = static_cast<double>(m.kv_lora_rank);
        const double up = gemm_seconds(gpu, c.p, T, heads_out, dc, 1, c.e);
        r.f += remote * up;
        r.b += remote * (up + gemm_seconds(gpu, c.p, T, dc, heads_out, 1, c.e));
        r.w += remote * gemm_seconds(gpu, c.p, heads_out, dc, T, 1, c.e);
      }
    }
  }
  // EP: dispatch + combine all-to-all forward, the same backward, of each token's top-k copies
  // (dispatch in FP8 under an FP8 layout, combine in BF16; DeepSeek-V3 §3.3.2). The copies for
  // experts inside the NVLink domain stay on NVLink; the rest cross the scale-out link, at most
  // moe_max_nodes times per token when routing is node-limited (DeepSeek-V3 §3.2.2: sent once
  // per node, then forwarded over NVLink).
  double ep_each = 0;
  if (moe && l.ep > 1) {
    const double tokens_here = T / (sp ? t : 1), k = static_cast<double>(m.top_k);
    const double inside = std::min(1.0, std::max(1.0, double(gpu.nvlink_domain) / t) / l.ep);
    double crossing = k * (1 - inside);
    if (m.moe_max_nodes > 0) crossing = std::min(crossing, static_cast<double>(m.moe_max_nodes));
    const double bytes_per_copy = h * (c.e + 2.0) / 2;  // dispatch + combine, averaged
    const LinkCost nv = link_cost(gpu, Link::kNvlink), out = link_cost(gpu, Link::kScaleOut);
    const double t_a2a = std::max(
        all_to_all_seconds(nv, tokens_here * k * bytes_per_copy,
                           std::min<int>(l.ep, gpu.nvlink_domain)),
        crossing > 0
            ? out.alpha * (l.ep - 1) + tokens_here * crossing * bytes_per_copy / out.bandwidth
            : 0.0);
    const bool dual = l.pp > 1 && l.schedule == schedule::ScheduleKind::kDualPipe;
    ep_each = 2 * t_a2a * (1 - (dual ? c.eff.ep_overlap_dualpipe : c.eff.ep_overlap_other));
  }
  r.f += tp_forward + cp_forward + ep_each;
  r.b += tp_forward + cp_backward + ep_each;
  r.tp = 2 * tp_forward;
  r.cp = cp_forward + cp_backward;
  r.ep = 2 * ep_each;
  // Recompute: full replays the forward (its TP collectives too; Megatron's checkpointed layer);
  // selective replays the attention core and the cheap elementwise products. Both replay the
  // attention core, so the forward ring too (the engine's recompute_core runs it again).
  if (l.recompute == Recompute::kFull) {
    // A MoE layer's replay routes again and runs its dispatch and combine all-to-alls again
    // (model/moe.h Moe::recompute): a third exchange pair per micro-batch.
    r.recompute = gemm_forward + core_forward + elem + tp_forward + ep_each;
    r.tp += tp_forward;
    r.ep += ep_each;
  } else if (l.recompute == Recompute::kSelective) {
    r.recompute = core_forward + 0.25 * elem + up_projections;
  } else if (l.recompute_policy() == RecomputePolicy::kNormUp) {
    // DeepSeek-V3 §3.2.3: the norms again (read each kept input, write its output) and MLA's
    // up-projections; the attention core is kept, so no ring is replayed.
    double norm_bytes = 0;
    for (const ActivationTerm& term : terms)
      if (!term.kept_norm_up && !term.tp_sharded) norm_bytes += 2 * term.bytes_per_token;
    r.recompute = up_projections + memory_seconds(gpu, T * norm_bytes / (sp ? t : 1));
  }
  if (moe && l.fp8_activations()) {
    // The MoE SwiGLU's output is recomputed from its cached inputs (DeepSeek-V3 §3.3.3): read
    // gate and up, write the product.
    const double experts = m.top_k + m.n_shared_experts;
    r.recompute += memory_seconds(gpu, T * experts * m.expert_ffn / t * 3 * 2.0);
  }
  if (l.recompute == Recompute::kSelective || l.recompute == Recompute::kFull) {
    r.b += cp_forward;
    r.cp += cp_forward;
  }
  r.b += r.recompute;
  return r;
}

// The LM head on its stage: final norm, logits GEMM forward/dgrad/wgrad (vocabulary split over
// TP), and the fused cross-entropy's passes over the fp32 logits.
PassCost head_cost(const Context& c) {
  PassCost r;
  const double V = split(static_cast<double>(c.m.vocab), c.l.tp),
               h = static_cast<double>(c.m.d_model);
  r.add_gemm(linear_seconds(c.gpu, c.p, c.tokens, V, h, c.e));
  const double logits = c.tokens * V * 4.0;
  r.f += memory_seconds(c.gpu, 2 * logits);
  r.b += memory_seconds(c.gpu, 2 * logits);
  return r;
}

// The head's unit with multi-token prediction (DeepSeek-V3 §2.2): after the main head, each of the
// D modules runs its projection [C, 2C], one layer (MoE when the model's layers are) and the
// shared head again, sequentially on the head's stage.
PassCost head_unit_cost(const Context& c, const PassCost& head, const PassCost& last_layer) {
  PassCost r = head;
  const double h = static_cast<double>(c.m.d_model);
  PassCost module = head;
  module.add_gemm(linear_seconds(c.gpu, c.p, c.tokens, h, 2 * h, c.e));
  module.f += last_layer.f, module.b += last_layer.b, module.w += last_layer.w;
  module.recompute += last_layer.recompute;
  module.tp += last_layer.tp, module.cp += last_layer.cp, module.ep += last_layer.ep;
  const double d = static_cast<double>(c.m.mtp_depth);
  r.f += d * module.f, r.b += d * module.b, r.w += d * module.w,
      r.recompute += d * module.recompute;
  r.tp += d * module.tp, r.cp += d * module.cp, r.ep += d * module.ep;
  return r;
}

}  // namespace

long schedule_simulations_run() {
  return g_simulations;
}

int microbatches_for(const Layout& l, int64_t seq_len, double batch_tokens) {
  const double seqs = batch_tokens / seq_len;
  const double per_replica = seqs / l.dp;
  const double m = per_replica / l.micro_batch;
  if (m < 1 || std::fabs(m - std::round(m)) > 1e-9) return 0;
  return static_cast<int>(std::lround(m));
}

double megatron_flops_per_iteration(const ModelSpec& m, double B, int64_t seq) {
  const double s = static_cast<double>(seq), l = static_cast<double>(m.n_layers),
               h = static_cast<double>(m.d_model), V = static_cast<double>(m.vocab);
  return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
}

double tied_embedding_elements(const ModelSpec& m, const Layout& l) {
  if (!m.head_reads_embedding() || l.pp <= 1 || l.schedule == schedule::ScheduleKind::kDualPipe) {
    return 0;
  }
  const double table = static_cast<double>(m.vocab) * static_cast<double>(m.d_model) / l.tp;
  return l.zero >= 2 ? std::ceil(table / l.dp) : table;
}

StepBreakdown model_step(const ModelSpec& m, const Gpu& gpu, const Layout& l, int64_t seq,
                         double batch_tokens, const Efficiency& eff, double give_up_above) {
  StepBreakdown r;
  const double peak = gpu.peak(l.precision);
  const double peak16 = gpu.bf16_flops > 0 ? gpu.bf16_flops : gpu.fp16_flops;
  if (peak <= 0)
    throw Error(fmt::format("{} has no dense {} peak; use --precision with one of: {}", gpu.model,
                            precision_name(l.precision), gpu.precisions()));
  const int mb = microbatches_for(l, seq, batch_tokens);
  if (mb == 0)
    throw Error(fmt::format(
        "batch of {:.0f} tokens = {:.1f} sequences of {} does not split into dp={} replicas x "
        "whole micro-batches of {}; change --batch-tokens, dp or micro_batch",
        batch_tokens, batch_tokens / seq, seq, l.dp, l.micro_batch));
  r.microbatches = mb;
  const PipelineShape shape = pipeline_shape(m, l);
  const bool dual = l.pp > 1 && l.schedule == schedule::ScheduleKind::kDualPipe;

  const double e = l.precision == Precision::kFp8 || l.precision == Precision::kFp4 ? 1.0 : 2.0;
  const Context c{m, gpu,        l, eff, seq, static_cast<double>(l.micro_batch) * seq / l.cp,
                  e, l.precision};
  const PassCost dense = layer_cost(c, false);
  const PassCost moe = m.is_moe() ? layer_cost(c, true) : dense;
  const PassCost head = head_unit_cost(c, head_cost(c), moe);

  // Each rank's work: the layers (and the head) of the stages it holds.
  PassCost busiest;
  for (int rank = 0; rank < l.pp; ++rank) {
    PassCost sum;
    for (int stage : shape.rank_stages[rank]) {
      const StageUnits& su = shape.stages[stage];
      for (int unit = su.first_unit; unit <= su.last_unit; ++unit) {
        if (unit == embedding_unit()) continue;
        const PassCost& p = unit == head_unit(m)           ? head
                            : unit - 1 >= m.dense_layers() ? moe
                                                           : dense;
        sum.f += p.f, sum.b += p.b, sum.w += p.w, sum.recompute += p.recompute;
        sum.tp += p.tp, sum.cp += p.cp, sum.ep += p.ep;
      }
    }
    if (sum.f + sum.b + sum.w > busiest.f + busiest.b + busiest.w) {
      busiest = sum;
      r.busiest_rank = rank;
    }
  }
  // One schedule action covers a rank's full share (interleaved chunks are a 1/v share of it;
  // the simulator scales) or, under DualPipe, one of its two copies' stages.
  const double share = dual ? 0.5 : 1.0;
  const double act_bytes = c.tokens * m.d_model * 2.0 / (l.sequence_parallel() ? l.tp : 1);
  const double p2p =
      l.pp > 1 ? p2p_seconds(link_cost(gpu, link_of(gpu, 2L * l.tp * l.cp * l.dp)), act_bytes)
               : 0.0;
  const double blocked = eff.blocking_p2p || l.blocking_p2p ? 2 * p2p : 0.0;  // per F and per B
  const double sf = busiest.f * share + blocked, sb = busiest.b * share + blocked,
               sw = busiest.w * share;
  // Each micro-batch passes one of a DualPipe rank's two stages (one per direction), so a
  // rank's work per micro-batch is one action's worth under every schedule.
  const double busy = mb * (sf + sb + sw);
  if (give_up_above < INFINITY && busy >= give_up_above) {
    r.step = INFINITY;
    return r;
  }
  double pipeline = busy;
  if (l.pp > 1) {
    const int v = shape.chunks;
    // Every rank is costed as the busiest, so the step's pipeline time is that work over the
    // share of time the schedule keeps a rank busy.
    pipeline = busy / (1 - simulated_bubble(l.schedule, l.pp, mb, v, sb / sf, sw / sf, p2p / sf));
  }
  r.stage_forward = sf;
  r.stage_backward_input = sb;
  r.stage_backward_weight = sw;
  r.p2p = p2p;
  r.bubble = pipeline - busy;
  r.bubble_fraction = r.bubble / pipeline;
  r.tp_comm = busiest.tp * share * mb;
  r.cp_comm = busiest.cp * share * mb;
  r.ep_comm = busiest.ep * share * mb;
  r.recompute = busiest.recompute * share * mb;
  r.compute = busy - r.tp_comm - r.cp_comm - r.ep_comm;
  r.pp_comm = mb * 2 * p2p * shape.chunks;

  // DP / ZeRO: reduce-scatter gradients (grad_bytes each) and all-gather bf16 parameters (ZeRO
  // 0's all-reduce moves the same bytes) over the dp x cp replicas, the experts over dp x cp /
  // ep; overlapped with the last micro-batch's backward and the next step's first forward
  // (Megatron's distributed optimizer); ZeRO-2 reduce-scatters after every micro-batch, ZeRO-3
  // also gathers weights for every forward and backward.
  r.memory = memory_per_gpu(m, l, seq, mb, gpu.overhead_bytes);
  const LocalParams local = params_per_gpu(m, l);
  const int n_d = l.dp * l.cp, n_e = std::max(1, l.dp * l.cp / l.ep);
  const LinkCost dp_link = link_cost(gpu, link_of(gpu, static_cast<long>(l.tp) * l.cp * l.dp));
  const double rs = reduce_scatter_seconds(dp_link, local.dense * l.grad_bytes, n_d) +
                    reduce_scatter_seconds(dp_link, local.expert * l.grad_bytes, n_e);
  const double ag = all_gather_seconds(dp_link, local.dense * 2.0, n_d) +
                    all_gather_seconds(dp_link, local.expert * 2.0, n_e);
  // DualPipe ends with the deferred W of one micro-batch of each copy, so its last backward
  // window is two stages long.
  const double backward_one_mb = (sb + sw) * (dual ? 2 : 1);
  r.dp_comm = std::max(0.0, rs - backward_one_mb) + std::max(0.0, ag - sf);
  // ZeRO-2's reduce-scatter of every earlier micro-batch's gradients runs on the communication
  // stream while the rank computes the next micro-batch (its forward, backward and weight
  // gradient), so only what exceeds one micro-batch's work is exposed.
  if (l.zero >= 2) r.dp_comm += (mb - 1) * std::max(0.0, rs - (sf + sb + sw));
  if (l.zero == 3) r.dp_comm += mb * std::max(0.0, 2 * ag - 0.9 * (sf + sb + sw));
  // Adam step over the local optimizer shard: read and write the fp32 master and both moments,
  // read the gradient, write the bf16 weights.
  const double shard =
      l.zero >= 1 ? local.dense / n_d + local.expert / n_e : local.dense + local.expert;
  // An EMA on the GPU reads the new weights and reads and writes its fp32 copy; in host memory
  // it is updated asynchronously after the step (DeepSeek-V3 §3.2.3) and costs no GPU time.
  const double bytes_per_param =
      8.0 + 4.0 * l.moment_bytes + l.grad_bytes + 2.0 + (l.ema == Ema::kGpu ? 10.0 : 0.0);
  r.optimizer = memory_seconds(gpu, bytes_per_param * shard);
  // Tied embeddings (or MTP modules) with the two ends on different pipeline ranks: the head's
  // gradient of the table goes to the first stage before the reduction, and the updated table
  // comes back after the update (parallel/pipeline/tied_embedding.h): two exposed transfers of
  // V/tp x C.
  r.tied_embedding = 0;
  if (const double table = tied_embedding_elements(m, l); table > 0) {
    const LinkCost pp_link = link_cost(gpu, link_of(gpu, 2L * l.tp * l.cp * l.dp));
    r.tied_embedding =
        p2p_seconds(pp_link, table * l.grad_bytes) + p2p_seconds(pp_link, table * 2.0);
  }
  r.step = pipeline + r.dp_comm + r.optimizer + r.tied_embedding;

  const double n = static_cast<double>(l.gpus());
  r.model_flops = model_flops_per_token(m, seq, AttentionFlops::kCausal) * batch_tokens;
  r.mfu = r.model_flops / (n * peak * r.step);
  r.mfu_bf16 = r.model_flops / (n * peak16 * r.step);
  r.mfu_palm = model_flops_per_token(m, seq, AttentionFlops::kFullSquare) * batch_tokens /
               (n * peak * r.step);
  const ModelCounts counts = count_model(m);
  const double attention =
      m.n_layers * attention_flops_per_token_layer(m, seq, AttentionFlops::kCausal);
  double hardware = r.model_flops;
  if (l.recompute == Recompute::kSelective) hardware += attention / 3 * batch_tokens;
  if (m.is_mla() &&
      (l.recompute == Recompute::kSelective || l.recompute_policy() == RecomputePolicy::kNormUp)) {
    // MLA's up-projections replayed: q_b (q_lora_rank -> NH d_qk) and kv_b (kv_lora_rank ->
    // NH (d_nope + d_v)), 2 FLOPs per multiply-add, every layer.
    const double up =
        static_cast<double>(m.q_lora_rank) * m.n_heads * m.qk_dim() +
        static_cast<double>(m.kv_lora_rank) * m.n_heads * (m.qk_nope_dim + m.v_head_dim);
    hardware += 2.0 * up * static_cast<double>(m.n_layers) * batch_tokens;
  }
  if (l.recompute == Recompute::kFull)
    hardware += (2.0 * counts.matmul_active + attention / 3) * batch_tokens;
  r.hardware_flops = hardware;
  r.hfu = hardware / (n * peak * r.step);
  r.tokens_per_second = batch_tokens / r.step;
  return r;
}

}  // namespace trillion::plan
