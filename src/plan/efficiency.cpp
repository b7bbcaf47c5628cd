// See efficiency.h.
#include "plan/efficiency.h"

#include <algorithm>
#include <cmath>

namespace trillion::plan {

double gemm_fraction(const Gpu& gpu, double m, double n, double k, double batch, Precision p) {
  const double tiles = batch * std::ceil(m / kGemmTile) * std::ceil(n / kGemmTile);
  const double waves = std::ceil(tiles / gpu.sm_count);
  const double wave_use = tiles / (waves * gpu.sm_count);
  const bool low = p == Precision::kFp8 || p == Precision::kFp4;
  const double large =
      low && gpu.fp8_gemm_efficiency > 0 ? gpu.fp8_gemm_efficiency : gpu.gemm_efficiency;
  const double k_overhead =
      low && gpu.fp8_gemm_k_overhead > 0 ? gpu.fp8_gemm_k_overhead : kGemmKOverhead;
  return large * wave_use * k / (k + k_overhead);
}

double gemm_seconds(const Gpu& gpu, Precision p, double m, double n, double k, double batch,
                    double elem_bytes) {
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  const double flops = 2 * m * n * k * batch;
  const double compute = flops / (gpu.peak(p) * gemm_fraction(gpu, m, n, k, batch, p));
  const double bytes = batch * elem_bytes * (m * k + k * n + m * n);
  return std::max(compute, memory_seconds(gpu, bytes));
}

GemmPasses linear_seconds(const Gpu& gpu, Precision p, double tokens, double out, double in,
                          double e) {
  return {gemm_seconds(gpu, p, tokens, out, in, 1, e), gemm_seconds(gpu, p, tokens, in, out, 1, e),
          gemm_seconds(gpu, p, out, in, tokens, 1, e)};
}

double flash_attention_forward_seconds(const Gpu& gpu, double flops, double query_len) {
  if (flops <= 0) return 0;
  const double peak = gpu.bf16_flops > 0 ? gpu.bf16_flops : gpu.fp16_flops;
  const double fraction = gpu.attention_efficiency * query_len / (query_len + kAttentionBlock);
  return flops / (peak * fraction);
}

double flash_attention_inference_seconds(const Gpu& gpu, double flops, double query_len) {
  if (gpu.attention_forward_efficiency <= 0)
    return flash_attention_forward_seconds(gpu, flops, query_len);
  if (flops <= 0) return 0;
  const double peak = gpu.bf16_flops > 0 ? gpu.bf16_flops : gpu.fp16_flops;
  const double fraction =
      gpu.attention_forward_efficiency * query_len / (query_len + kAttentionBlock);
  return flops / (peak * fraction);
}

double memory_seconds(const Gpu& gpu, double bytes) {
  return bytes / (gpu.hbm_bandwidth * gpu.memory_efficiency);
}

LinkCost link_cost(const Gpu& gpu, Link link) {
  // NVLink's datasheet figure counts both directions; collectives move data one way per step.
  if (link == Link::kNvlink)
    return {gpu.nvlink_latency, gpu.nvlink_bandwidth / 2 * gpu.collective_efficiency};
  return {gpu.scaleout_latency, gpu.scaleout_bandwidth * gpu.collective_efficiency};
}

Link link_of(const Gpu& gpu, long span) {
  return span <= gpu.nvlink_domain ? Link::kNvlink : Link::kScaleOut;
}

double all_reduce_seconds(const LinkCost& l, double bytes, int n) {
  if (n <= 1 || bytes <= 0) return 0;  // nothing to send: no collective is launched
  return 2.0 * (n - 1) * l.alpha + 2.0 * (n - 1) / n * bytes / l.bandwidth;
}

double all_gather_seconds(const LinkCost& l, double bytes, int n) {
  if (n <= 1 || bytes <= 0) return 0;
  return (n - 1) * l.alpha + (n - 1.0) / n * bytes / l.bandwidth;
}

double reduce_scatter_seconds(const LinkCost& l, double bytes, int n) {
  return all_gather_seconds(l, bytes, n);
}

double all_to_all_seconds(const LinkCost& l, double bytes, int n) {
  if (n <= 1 || bytes <= 0) return 0;
  return (n - 1) * l.alpha + (n - 1.0) / n * bytes / l.bandwidth;
}

double p2p_seconds(const LinkCost& l, double bytes) {
  return l.alpha + bytes / l.bandwidth;
}

}  // namespace trillion::plan
