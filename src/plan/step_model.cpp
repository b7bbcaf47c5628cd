// See step_model.h.
#include "plan/step_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "core/error.h"
#include "schedule/generators.h"
#include "schedule/simulator.h"

namespace trillion::plan {
namespace {

long g_simulations = 0;

// Bubble fraction (idle over total, all ranks) of a schedule from the simulator, cached by
// (kind, p, m, v, B/F, W/F, comm/F) with the ratios rounded (B, W to 0.05 F, comm to 0.005 F) so
// that the search reuses simulations across layouts with near-identical cost shapes.
double simulated_bubble(schedule::ScheduleKind kind, int p, int m, int v, double b_over_f,
                        double w_over_f, double c_over_f) {
  using Key = std::tuple<int, int, int, int, long, long, long>;
  static std::map<Key, double> cache;
  const long bq = std::max(1L, std::lround(b_over_f * 20)), wq = std::lround(w_over_f * 20),
             cq = std::lround(c_over_f * 200);
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

double ring_time(double bytes, int n, double bandwidth) {
  return n <= 1 ? 0.0 : (n - 1.0) / n * bytes / bandwidth;
}

double gemm_fraction(const Efficiency& e, Precision p) {
  switch (p) {
    case Precision::kBf16:
      return e.gemm_bf16;
    case Precision::kFp8:
      return e.gemm_fp8;
    case Precision::kFp4:
      return e.gemm_fp4;
  }
  return e.gemm_bf16;
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

StepBreakdown model_step(const ModelSpec& m, const Gpu& gpu, const Layout& l, int64_t seq,
                         double batch_tokens, const Efficiency& eff, double give_up_above) {
  StepBreakdown r;
  const double peak = gpu.peak(l.precision), peak_bf16 = gpu.bf16_flops;
  if (peak <= 0)
    throw Error(fmt::format("{} has no dense {} peak; use --precision bf16", gpu.model,
                            precision_name(l.precision)));
  const int mb = microbatches_for(l, seq, batch_tokens);
  if (mb == 0)
    throw Error(fmt::format(
        "batch of {:.0f} tokens = {:.1f} sequences of {} does not split into dp={} replicas x "
        "whole micro-batches of {}; change --batch-tokens, dp or micro_batch",
        batch_tokens, batch_tokens / seq, seq, l.dp, l.micro_batch));
  r.microbatches = mb;
  const ModelCounts c = count_model(m);
  const StageShape st = stage_shape(m, l);
  const bool dual = l.pp > 1 && l.schedule == schedule::ScheduleKind::kDualPipe;

  // Per layer, per micro-batch, on one GPU.
  const double tokens = static_cast<double>(l.micro_batch) * seq / l.cp;
  const double dense_mm = c.attention + c.dense_mlp;  // matmul weights of one layer
  const double moe_mm = c.attention + c.router + (m.n_shared_experts + m.top_k) * c.expert;
  const double layer_mm = st.moe_fraction * moe_mm + (1 - st.moe_fraction) * dense_mm;
  const double gemm_flops = 6.0 * tokens * layer_mm / l.tp;
  const double attn_flops = tokens * attention_flops_per_token_layer(m, seq, AttentionFlops::kCausal) / l.tp;
  const double t_gemm = gemm_flops / (peak * gemm_fraction(eff, l.precision));
  const double t_attn = attn_flops / (peak_bf16 * eff.attention);
  // Elementwise work (norms, RoPE, SwiGLU, residuals, softmax bookkeeping) is memory bound: the
  // stored activations are written once forward and read + their gradients written backward.
  const double e = 2.0;
  const bool sp = l.tp > 1;
  const double act_tok =
      st.moe_fraction *
          layer_bytes_per_token(block_terms(m, true, e), l.tp, sp, Recompute::kNone, 0) +
      (1 - st.moe_fraction) *
          layer_bytes_per_token(block_terms(m, false, e), l.tp, sp, Recompute::kNone, 0);
  const double t_elem = 3.0 * tokens * act_tok / gpu.hbm_bandwidth;
  double f = t_gemm / 3 + t_attn / 3 + t_elem / 3;
  double b = t_gemm / 3 + 2 * t_attn / 3 + 2 * t_elem / 3;
  const double w = t_gemm / 3;
  double recompute = 0;
  // Selective recompute (the engine's policy, plan/activation_memory.h) redoes the attention
  // core from Q, K, V (one FlashAttention forward) and the SwiGLU product from gate and up
  // (about a quarter of the forward's elementwise traffic). Full recompute redoes the forward.
  if (l.recompute == Recompute::kSelective) recompute = t_attn / 3 + t_elem / 3 * 0.25;
  if (l.recompute == Recompute::kFull) recompute = f;
  b += recompute;

  // Bandwidths: a group stays in the NVLink domain when its GPUs and the inner dimensions fit.
  const double nvlink = gpu.nvlink_bandwidth / 2 * eff.nvlink;
  const double network = gpu.scaleout_bandwidth * eff.network;
  auto group_bw = [&](long inner_times_size) {
    return inner_times_size <= gpu.nvlink_domain ? nvlink : network;
  };
  // TP with SP: per layer 2 all-gathers + 2 reduce-scatters forward and the same backward, of
  // the whole [tokens, C] activation (Korthikanti §4.2.2).
  const double tp_coll = ring_time(tokens * m.d_model * e, l.tp, group_bw(l.tp));
  const double tp_exposed = 4 * tp_coll * (1 - eff.tp_overlap);
  f += tp_exposed;
  b += tp_exposed;
  // CP (Llama 3 §3.3.2): all-gather K and V forward, reduce-scatter dK, dV backward. Attention
  // needs the gathered K/V, so the collective is exposed (Llama 3 accepts this because it is
  // small next to long-context attention).
  double cp_f = 0, cp_b = 0;
  if (l.cp > 1) {
    const double kv_heads_per_gpu =
        m.is_mla() ? double(m.n_heads) / l.tp : std::max<double>(1.0, m.n_kv_heads / double(l.tp));
    const double bytes =
        static_cast<double>(l.micro_batch) * seq * kv_heads_per_gpu * (m.qk_dim() + m.v_dim()) * e;
    cp_f = cp_b = ring_time(bytes, l.cp, group_bw(static_cast<long>(l.tp) * l.cp));
    f += cp_f;
    b += cp_b;
  }
  // EP: dispatch + combine all-to-all forward, the same backward, of each token's top-k copies.
  double ep_f = 0;
  if (m.is_moe() && l.ep > 1) {
    const double bytes = tokens / l.tp * m.top_k * m.d_model * e;
    const double leave = bytes * (l.ep - 1.0) / l.ep;
    const double local_share =
        std::min(1.0, std::max(1.0, double(gpu.nvlink_domain) / l.tp) / l.ep);
    const double t = std::max(leave * (1 - local_share) / network, leave * local_share / nvlink);
    const double hidden = dual ? eff.ep_overlap_dualpipe : eff.ep_overlap_other;
    ep_f = 2 * t * st.moe_fraction * (1 - hidden);
    f += ep_f;
    b += ep_f;
  }

  // One pipeline stage (what one schedule action covers): a rank's layers, or one copy's stage
  // under DualPipe; interleaved chunks are a 1/v share of it (the simulator scales).
  const double stage_layers = dual ? st.layers_per_stage : st.layers_per_rank;
  const double sf = f * stage_layers, sb = b * stage_layers, sw = w * stage_layers;
  const double p2p = l.pp > 1 ? tokens * m.d_model * e / l.tp / network : 0.0;
  if (give_up_above < INFINITY && mb * (sf + sb + sw) >= give_up_above) {
    r.step = INFINITY;
    return r;
  }
  double pipeline = 0;
  if (l.pp == 1) {
    pipeline = mb * (sf + sb + sw);
  } else {
    const int v = l.schedule == schedule::ScheduleKind::kInterleaved ? l.chunks : dual ? 2 : 1;
    // Every rank does the same work, so the step's pipeline time is that work over the share
    // of time the schedule keeps a rank busy.
    pipeline = mb * (sf + sb + sw) /
               (1 - simulated_bubble(l.schedule, l.pp, mb, v, sb / sf, sw / sf, p2p / sf));
  }
  const double busy = mb * (sf + sb + sw);
  r.layer_forward = f;
  r.layer_backward_input = b;
  r.layer_backward_weight = w;
  r.stage_forward = sf;
  r.stage_backward_input = sb;
  r.stage_backward_weight = sw;
  r.p2p = p2p;
  r.bubble = pipeline - busy;
  r.bubble_fraction = r.bubble / pipeline;
  const double per_step = stage_layers * mb;  // layer-passes per step on this rank
  r.tp_comm = 2 * tp_exposed * per_step;
  r.cp_comm = (cp_f + cp_b) * per_step;
  r.ep_comm = 2 * ep_f * per_step;
  r.recompute = recompute * per_step;
  r.compute = busy - r.tp_comm - r.cp_comm - r.ep_comm;
  r.pp_comm = mb * 2 * p2p;

  // DP / ZeRO: reduce-scatter gradients and all-gather parameters (2 bytes each per parameter;
  // ZeRO 0's all-reduce moves the same bytes), over the network; the
  // non-expert weights over dp x cp ranks, the experts over dp x cp / ep. Overlapped with the
  // last micro-batch's backward and the next step's first forward (Megatron's distributed
  // optimizer); ZeRO-3's per-micro-batch gathers with that micro-batch's compute.
  const MemoryBreakdown mem = memory_per_gpu(m, l, seq, mb);
  r.memory = mem;
  const LocalParams local = params_per_gpu(m, l);
  const int n_d = l.dp * l.cp, n_e = std::max(1, l.dp * l.cp / l.ep);
  const double rs =
      ring_time(local.dense * e, n_d, network) + ring_time(local.expert * e, n_e, network);
  const double ag = rs;
  // DualPipe ends with the deferred W of one micro-batch of each copy, so its last backward
  // window is two stages long.
  const double backward_one_mb = (sb + sw) * (dual ? 2 : 1);
  r.dp_comm = std::max(0.0, rs - backward_one_mb) + std::max(0.0, ag - sf);
  // ZeRO-2 cannot keep a full gradient buffer across micro-batches: it reduce-scatters after
  // every micro-batch's backward; ZeRO-3 also gathers weights for every forward and backward.
  if (l.zero >= 2) r.dp_comm += (mb - 1) * std::max(0.0, rs - backward_one_mb);
  if (l.zero == 3) r.dp_comm += mb * std::max(0.0, 2 * ag - 0.9 * (sf + sb + sw));
  // Adam step: read param, grad, two moments and master, write four of them (~32 bytes/param of
  // the local optimizer shard) at HBM bandwidth.
  const double shard =
      l.zero >= 1 ? local.dense / n_d + local.expert / n_e : local.dense + local.expert;
  r.optimizer = 32.0 * shard / gpu.hbm_bandwidth;
  r.step = pipeline + r.dp_comm + r.optimizer;

  const double n = static_cast<double>(l.gpus());
  r.model_flops = model_flops_per_token(m, seq, AttentionFlops::kCausal) * batch_tokens;
  r.mfu = r.model_flops / (n * peak * r.step);
  r.mfu_bf16 = r.model_flops / (n * peak_bf16 * r.step);
  r.mfu_palm = model_flops_per_token(m, seq, AttentionFlops::kFullSquare) * batch_tokens / (n * peak * r.step);
  double hardware = r.model_flops;
  if (l.recompute == Recompute::kSelective)
    hardware += m.n_layers * attention_flops_per_token_layer(m, seq, AttentionFlops::kCausal) / 3 * batch_tokens;
  if (l.recompute == Recompute::kFull)
    hardware +=
        (2.0 * c.matmul_active + m.n_layers * attention_flops_per_token_layer(m, seq, AttentionFlops::kCausal) / 3) *
        batch_tokens;
  r.hfu = hardware / (n * peak * r.step);
  r.tokens_per_second = batch_tokens / r.step;
  return r;
}

}  // namespace trillion::plan
