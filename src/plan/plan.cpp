// See plan.h.
#include "plan/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "core/error.h"
#include "plan/model_file.h"
#include "plan/units.h"

namespace trillion::plan {

RunEstimate estimate_run(const PlanInputs& in, const Candidate& c) {
  RunEstimate r;
  const ModelCounts counts = count_model(in.model);
  r.chinchilla_tokens = in.tokens <= 0;
  r.tokens = r.chinchilla_tokens ? chinchilla_tokens(static_cast<double>(counts.total)) : in.tokens;
  r.flops_6nd = 6.0 * counts.activated * r.tokens;
  r.flops_exact = model_flops_per_token(in.model, in.seq_len, AttentionFlops::kCausal) * r.tokens;
  const double ideal_seconds = r.tokens / c.step.tokens_per_second;
  r.ideal_days = ideal_seconds / 86400;
  // A checkpoint is the fp32 master weights and two Adam moments (12 bytes per parameter; the
  // bf16 weights derive from the master copy, gradients are not saved), each data-parallel
  // replica writing a disjoint slice: the busiest rank writes 12 x its parameters / n_d.
  const LocalParams lp = params_per_gpu(in.model, c.layout);
  const int n_d = c.layout.dp * c.layout.cp;
  r.checkpoint_bytes_per_gpu =
      c.layout.optimizer_bytes() * (lp.dense / n_d + lp.expert / std::max(1, n_d / c.layout.ep));
  r.checkpoint_seconds = r.checkpoint_bytes_per_gpu / in.checkpoint_bytes_per_second;
  FailureInputs fi;
  fi.gpus = in.gpus;
  fi.failures_per_gpu_hour = in.gpu.failures_per_gpu_hour;
  fi.checkpoint_seconds = r.checkpoint_seconds;
  fi.restart_seconds = in.restart_seconds;
  fi.ideal_seconds = ideal_seconds;
  fi.host_repair_seconds = in.host_repair_seconds;
  if (in.elastic) {
    const Layout& l = c.layout;
    const auto micro_batches =
        static_cast<int64_t>(std::llround(in.batch_tokens / in.seq_len / l.micro_batch));
    r.elastic_dp = elastic_replicas(l.dp, l.cp, l.ep, static_cast<long>(l.tp) * l.pp * l.cp,
                                    in.host_gpus, micro_batches);
    fi.shrunk_speed = static_cast<double>(r.elastic_dp) / l.dp;
  }
  r.failures = estimate_failures(fi);
  r.days = r.failures.wall_seconds / 86400;
  r.gpu_hours = r.failures.wall_seconds / 3600 * in.gpus;
  r.cost_usd = r.gpu_hours * in.gpu.usd_per_gpu_hour;
  return r;
}

Plan make_plan(PlanInputs in) {
  if (in.gpus <= 0 || in.gpus > kMaxGpus)
    throw Error(fmt::format("--gpus {} is not in 1 to {} (2^24)", in.gpus, kMaxGpus));
  if (in.seq_len <= 0) in.seq_len = in.model.default_seq;
  if (in.seq_len > kMaxSeqLen)
    throw Error(fmt::format("--seq {} exceeds {} (2^24), the engine's longest sequence", in.seq_len,
                            kMaxSeqLen));
  bool default_batch = false;
  // Who chose the batch, for messages: the option, or the model's batch_tokens.
  std::string batch_option = "--batch-tokens";
  if (in.batch_tokens <= 0) {
    in.batch_tokens = in.model.default_batch_tokens;
    batch_option = fmt::format("model {}'s batch_tokens", in.model.name);
    if (in.batch_tokens <= 0 || in.seq_len != in.model.default_seq) {
      // No published batch: ~16Mi tokens, rounded to a whole number of sequences per GPU so that
      // every data-parallel degree of this GPU count divides it.
      const double per_gpu =
          std::max(1.0, std::round(16.0 * 1024 * 1024 / in.seq_len / static_cast<double>(in.gpus)));
      in.batch_tokens = per_gpu * static_cast<double>(in.gpus) * static_cast<double>(in.seq_len);
      default_batch = true;
    }
  }
  const double seqs = in.batch_tokens / in.seq_len;
  if (!std::isfinite(seqs) || seqs < 1 || std::fabs(seqs - std::round(seqs)) > 1e-9) {
    const double pow2 = std::exp2(std::round(std::log2(std::min(std::max(seqs, 1.0), 1e9))));
    throw Error(
        fmt::format("{} {:.15g} is not a whole number of {}-token sequences; use e.g. {:.0f} "
                    "({:.0f} sequences; 16Mi = 2^24 is Llama 3's \"16M\")",
                    batch_option, in.batch_tokens, in.seq_len, pow2 * in.seq_len, pow2));
  }
  if (seqs > kMaxBatchSequences)
    throw Error(
        fmt::format("{} {:.15g} is {:.15g} sequences of {}; a plan takes at most {:.0f} "
                    "(2^30) sequences per step",
                    batch_option, in.batch_tokens, seqs, in.seq_len, kMaxBatchSequences));
  const SearchOptions& so = in.search;
  // A fixed degree above the GPU count cannot be laid out (and would overflow products).
  for (const auto& [fixed, name, value] :
       {std::tuple{so.fields.tp, "tp", so.fixed.tp}, std::tuple{so.fields.pp, "pp", so.fixed.pp},
        std::tuple{so.fields.cp, "cp", so.fixed.cp}, std::tuple{so.fields.dp, "dp", so.fixed.dp},
        std::tuple{so.fields.ep, "ep", so.fixed.ep}})
    if (fixed && value > in.gpus)
      throw Error(fmt::format("--layout {}={} exceeds --gpus {}", name, value, in.gpus));
  if (so.fields.tp && so.fields.pp && so.fields.cp && so.fields.dp &&
      static_cast<double>(so.fixed.tp) * so.fixed.pp * so.fixed.cp * so.fixed.dp !=
          static_cast<double>(in.gpus))
    throw Error(fmt::format(
        "--layout tp*pp*cp*dp = {:.0f} but --gpus is {}; they must match",
        static_cast<double>(so.fixed.tp) * so.fixed.pp * so.fixed.cp * so.fixed.dp, in.gpus));
  Plan p;
  p.inputs = in;
  p.search = search_layouts(in.model, in.gpu, in.gpus, in.seq_len, in.batch_tokens, so);
  p.run = estimate_run(in, p.best());
  const Gpu& g = in.gpu;
  const Efficiency& e = so.efficiency;
  auto src = [&](const char* key) {
    const std::string s = g.source_of(key);
    return s.empty() ? std::string("no source given in ") + g.file : s;
  };
  p.assumptions = {
      {"model",
       fmt::format("{}; {} ({})", in.model.name, describe_block(in.model), in.model.source)},
      {"GPU peak",
       fmt::format("{} dense {}; {}", g.model,
                   fmt::format("bf16 {:.0f}, fp16 {:.0f}, fp8 {:.0f}, fp4 {:.0f} TFLOP/s",
                               g.bf16_flops / 1e12, g.fp16_flops / 1e12, g.fp8_flops / 1e12,
                               g.fp4_flops / 1e12),
                   src(g.fp16_flops > 0 && g.bf16_flops == g.fp16_flops ? "bf16" : "fp16"))},
      {"GEMM efficiency",
       fmt::format("{:.0f}% of dense peak for large GEMMs ({}), times wave quantisation over {} "
                   "SMs and K / (K + 128), or the HBM roofline when memory bound{}",
                   100 * g.gemm_efficiency, src("gemm"), g.sm_count,
                   g.fp8_gemm_efficiency > 0
                       ? fmt::format("; FP8/FP4 GEMMs {:.1f}% of their peak x K / (K + {:.0f}) "
                                     "({})",
                                     100 * g.fp8_gemm_efficiency,
                                     g.fp8_gemm_k_overhead > 0 ? g.fp8_gemm_k_overhead : 128.0,
                                     src("fp8_gemm"))
                       : std::string())},
      {"attention efficiency",
       fmt::format("FlashAttention at {:.0f}% of the 16-bit peak x Lq/(Lq + 256) ({}); "
                   "materialised attention as batched GEMMs of the score matrix",
                   100 * g.attention_efficiency, src("attention"))},
      {"memory bandwidth",
       fmt::format("{:.0f}% of {} ({}); elementwise kernels make {:.0f} passes "
                   "over each layer's stored activations",
                   100 * g.memory_efficiency, fmt::format("{:.2f} TB/s", g.hbm_bandwidth / 1e12),
                   src("memory"), e.elementwise_passes)},
      {"MFU convention",
       "model FLOPs with causal attention (6N + 6 L h s per token) over the dense peak of the "
       "layout's precision (mfu_bf16: over the 16-bit peak); mfu_palm counts the full s x s "
       "attention (12 L h s); HFU adds recompute"},
      {"collectives",
       fmt::format("alpha-beta rings at {:.0f}% of one-way NVLink ({:.0f} GB/s, alpha {:.0f} us) "
                   "inside the {}-GPU domain and of the {:.0f} GB/s scale-out link (alpha {:.0f} "
                   "us) outside it ({}; {})",
                   100 * g.collective_efficiency, g.nvlink_bandwidth / 2e9, g.nvlink_latency * 1e6,
                   g.nvlink_domain, g.scaleout_bandwidth / 1e9, g.scaleout_latency * 1e6,
                   src("collective"), src("latency"))},
      {"overlap",
       fmt::format("TP/SP collectives {:.0f}% hidden; EP all-to-all {:.0f}% hidden under "
                   "DualPipe (DeepSeek-V3 §3.2.1), {:.0f}% otherwise; DP reduce-scatter/all-gather "
                   "hidden behind one micro-batch's backward/forward; {}; pipeline sends {}",
                   100 * e.tp_overlap, 100 * e.ep_overlap_dualpipe, 100 * e.ep_overlap_other,
                   e.cp_all_gather || p.best().layout.cp_all_gather
                       ? "CP all-gather exposed (Llama 3 §3.3.2)"
                       : "CP ring hops hidden behind each ring step's attention "
                         "blocks where they last long enough, the last dK/dV hop "
                         "exposed",
                   e.blocking_p2p || p.best().layout.blocking_p2p
                       ? "block each F and B (DeepSpeed's PipelineEngine)"
                       : "asynchronous (they delay only through the bubble)")},
      {"tokens", p.run.chinchilla_tokens
                     ? fmt::format("Chinchilla-optimal for {} total parameters (Hoffmann "
                                   "et al. Table 3): {}",
                                   format_count(static_cast<double>(count_model(in.model).total)),
                                   format_count(p.run.tokens))
                     : fmt::format("given: {}", format_count(p.run.tokens))},
      {"batch", fmt::format("{} tokens per step ({:.0f} sequences of {}){}",
                            format_count(in.batch_tokens), seqs, in.seq_len,
                            default_batch ? "; no published batch: ~16Mi tokens rounded to whole "
                                            "sequences per GPU (--batch-tokens to choose)"
                                          : "")},
      {"price",
       fmt::format("${:.2f} per GPU-hour for {} ({})", g.usd_per_gpu_hour, g.model, src("price"))},
      {"failure rate", fmt::format("{:.3f} unexpected interruptions per 1,000 GPU-days ({})",
                                   g.failures_per_gpu_hour * 24 * 1000, src("failures"))},
      {"checkpoint",
       fmt::format("fp32 master + Adam moments, sliced over data-parallel replicas ({} "
                   "per GPU), written at {:.1f} GB/s per GPU "
                   "(Llama 3's 7 TB/s storage peak / 16K GPUs), interval from Daly (2006)",
                   format_bytes(p.run.checkpoint_bytes_per_gpu),
                   in.checkpoint_bytes_per_second / 1e9)},
      {"restart", fmt::format("{:.0f} minutes per interruption (detect, relaunch, initialise, "
                              "load); an assumption",
                              in.restart_seconds / 60)},
      {"memory",
       fmt::format(
           "fits if under {} per GPU; reserves {} ({}) + 5% fragmentation; {}; {}{}",
           format_bytes(g.hbm_bytes), format_bytes(g.overhead_bytes), src("overhead"),
           p.best().layout.fp8_activations()
               ? "activations stored in 16 bits except DeepSeek-V3 §3.3.3's FP8 cache (act=fp8): "
                 "the FP8 linears' inputs in E4M3 + an fp32 scale per 128, the attention "
                 "output in E5M6, the MoE SwiGLU's inputs in FP8 with its output (and the "
                 "routing weight applied in it) recomputed; norm statistics in fp32"
               : "activations stored in 16 bits, norm statistics in fp32",
           p.best().layout.ema == Ema::kHost
               ? fmt::format("the parameters' EMA in host memory ({} per GPU, DeepSeek-V3 "
                             "§3.2.3), ",
                             format_bytes(p.best().step.memory.host_ema))
               : "",
           p.best().layout.allocation == Allocation::kSlots
               ? "each pipeline chunk keeps slots for its own peak of micro-batches in "
                 "flight, as the engine allocates (alloc=slots; alloc=live for a caching "
                 "allocator's peak)"
               : "a rank holds the largest sum over its chunks of micro-batches in flight "
                 "at one moment of the schedule, as a caching allocator does (alloc=live)")},
  };
  if (in.host_repair_seconds > 0) {
    const FailureEstimate& f = p.run.failures;
    const Layout& l = p.best().layout;
    p.assumptions.emplace_back(
        "host repair",
        fmt::format(
            "every interruption takes a host of {} GPUs out for {} (no spare); {}; {} per "
            "failure lost to the repair",
            in.host_gpus, format_seconds(in.host_repair_seconds),
            !in.elastic ? "the job waits for it (--elastic: run on the surviving hosts meanwhile)"
            : p.run.elastic_dp == 0
                ? "elastic: no smaller layout holds the batch, so the job waits"
                : fmt::format("elastic: the surviving hosts run dp {} of {} ({:.1f}% of the "
                              "throughput, the global batch kept by accumulation) and restart "
                              "once more to grow back; {}",
                              p.run.elastic_dp, l.dp, 100.0 * p.run.elastic_dp / l.dp,
                              f.elastic ? "cheaper than waiting"
                                        : "waiting is cheaper (the repair is shorter than the "
                                          "extra restart is worth)"),
            format_seconds(f.repair_cost)));
  }
  if (p.best().layout.pp > 1) {
    const int m2 = steady_state_microbatches(p.best().layout.pp);
    p.assumptions.emplace_back(
        "pipeline schedule",
        fmt::format("bubble from the schedule simulator with the busiest rank's stage costs; "
                    "schedules of more than {} micro-batches are played with {} and {} and "
                    "their idle time extended along that straight line (exact once steady), "
                    "their activation slots those of {}; schedules above {} stage x micro-batch "
                    "pairs are not searched",
                    m2, m2 / 2, m2, m2, kMaxScheduleSize));
  }
  p.scale_out = estimate_scale_out(in.scale_out, static_cast<double>(count_model(in.model).total),
                                   p.best().step.step, p.best().layout.dp, in.batch_tokens);
  for (auto& a : scale_out_assumptions(in.scale_out)) p.assumptions.push_back(std::move(a));
  return p;
}

}  // namespace trillion::plan
