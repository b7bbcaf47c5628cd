// See plan.h.
#include "plan/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

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
  r.checkpoint_bytes_per_gpu = 12.0 * (lp.dense / n_d + lp.expert / std::max(1, n_d / c.layout.ep));
  r.checkpoint_seconds = r.checkpoint_bytes_per_gpu / in.checkpoint_bytes_per_second;
  FailureInputs fi;
  fi.gpus = in.gpus;
  fi.failures_per_gpu_hour = in.gpu.failures_per_gpu_hour;
  fi.checkpoint_seconds = r.checkpoint_seconds;
  fi.restart_seconds = in.restart_seconds;
  fi.ideal_seconds = ideal_seconds;
  r.failures = estimate_failures(fi);
  r.days = r.failures.wall_seconds / 86400;
  r.gpu_hours = r.failures.wall_seconds / 3600 * in.gpus;
  r.cost_usd = r.gpu_hours * in.gpu.usd_per_gpu_hour;
  return r;
}

Plan make_plan(PlanInputs in) {
  if (in.gpus <= 0) throw Error(fmt::format("--gpus must be positive, got {}", in.gpus));
  if (in.seq_len <= 0) in.seq_len = in.model.default_seq;
  if (in.batch_tokens <= 0) {
    in.batch_tokens = in.model.default_batch_tokens;
    if (in.batch_tokens <= 0 || in.seq_len != in.model.default_seq)
      in.batch_tokens = std::max(1.0, std::round(16.0 * 1024 * 1024 / in.seq_len)) *
                        static_cast<double>(in.seq_len);
  }
  const double seqs = in.batch_tokens / in.seq_len;
  if (seqs < 1 || std::fabs(seqs - std::round(seqs)) > 1e-9) {
    const double pow2 = std::exp2(std::round(std::log2(std::max(seqs, 1.0))));
    throw Error(fmt::format(
        "--batch-tokens {:.0f} is not a whole number of {}-token sequences; use e.g. {:.0f} "
        "({:.0f} sequences; 16Mi = 2^24 is Llama 3's \"16M\")",
        in.batch_tokens, in.seq_len, pow2 * in.seq_len, pow2));
  }
  const SearchOptions& so = in.search;
  if (so.fields.tp && so.fields.pp && so.fields.cp && so.fields.dp &&
      static_cast<long>(so.fixed.tp) * so.fixed.pp * so.fixed.cp * so.fixed.dp != in.gpus)
    throw Error(fmt::format(
        "--layout tp*pp*cp*dp = {} but --gpus is {}; they must match",
        static_cast<long>(so.fixed.tp) * so.fixed.pp * so.fixed.cp * so.fixed.dp, in.gpus));
  Plan p;
  p.inputs = in;
  p.search = search_layouts(in.model, in.gpu, in.gpus, in.seq_len, in.batch_tokens, so);
  p.run = estimate_run(in, p.best());
  const Efficiency& e = so.efficiency;
  p.assumptions = {
      {"GEMM efficiency",
       fmt::format("{:.0f}% of BF16 peak ({:.0f}% FP8, {:.0f}% FP4), calibrated on Llama 3 405B "
                   "Table 4 row 1 (43% MFU on 8,192 H100)",
                   100 * e.gemm_bf16, 100 * e.gemm_fp8, 100 * e.gemm_fp4)},
      {"attention efficiency",
       fmt::format("{:.0f}% of BF16 peak for causal FlashAttention forward+backward",
                   100 * e.attention)},
      {"MFU convention",
       "model FLOPs with causal attention (6N + 6 L h s per token) over the dense peak of the "
       "layout's precision (mfu_bf16: over the BF16 peak); mfu_palm counts the full s x s "
       "attention"},
      {"collective bandwidth",
       fmt::format("{:.0f}% of one-way NVLink inside the {}-GPU domain, {:.0f}% of the {:.0f} "
                   "GB/s scale-out link per GPU outside it",
                   100 * e.nvlink, in.gpu.nvlink_domain, 100 * e.network,
                   in.gpu.scaleout_bandwidth / 1e9)},
      {"overlap",
       fmt::format("TP/SP collectives {:.0f}% hidden; EP all-to-all {:.0f}% hidden under "
                   "DualPipe, {:.0f}% otherwise; DP reduce-scatter/all-gather hidden behind one "
                   "micro-batch's backward/forward; CP all-gather exposed",
                   100 * e.tp_overlap, 100 * e.ep_overlap_dualpipe, 100 * e.ep_overlap_other)},
      {"tokens", p.run.chinchilla_tokens
                     ? fmt::format("Chinchilla-optimal for {:.0f}B total parameters (Hoffmann "
                                   "et al. Table 3): {:.2f}T",
                                   count_model(in.model).total / 1e9, p.run.tokens / 1e12)
                     : fmt::format("given: {:.3g} tokens", p.run.tokens)},
      {"batch", fmt::format("{:.0f} tokens per step ({:.0f} sequences of {})", in.batch_tokens,
                            seqs, in.seq_len)},
      {"price", fmt::format("${:.2f} per GPU-hour for {} ({})", in.gpu.usd_per_gpu_hour,
                            in.gpu.model, in.gpu.notes)},
      {"failure rate",
       fmt::format("{:.3f} unexpected interruptions per 1,000 GPU-days (Llama 3: 419 in 54 days "
                   "on 16,384 GPUs = 0.47)",
                   in.gpu.failures_per_gpu_hour * 24 * 1000)},
      {"checkpoint",
       fmt::format("fp32 master + Adam moments, sliced over data-parallel replicas ({:.2f} GB "
                   "per GPU), written at {:.1f} GB/s per GPU "
                   "(Llama 3's 7 TB/s storage peak / 16K GPUs), interval from Daly (2006)",
                   p.run.checkpoint_bytes_per_gpu / 1e9, in.checkpoint_bytes_per_second / 1e9)},
      {"restart", fmt::format("{:.0f} minutes per interruption (detect, relaunch, initialise, "
                              "load); an assumption",
                              in.restart_seconds / 60)},
      {"memory", fmt::format("fits if under {:.0f} GB; includes 3 GB of CUDA/NCCL workspaces and "
                             "5% fragmentation; activations stored in 16 bits",
                             in.gpu.hbm_bytes / 1e9)},
  };
  p.scale_out = estimate_scale_out(in.scale_out, static_cast<double>(count_model(in.model).total),
                                   p.best().step.step, p.best().layout.dp, in.batch_tokens);
  for (auto& a : scale_out_assumptions(in.scale_out)) p.assumptions.push_back(std::move(a));
  return p;
}

}  // namespace trillion::plan
