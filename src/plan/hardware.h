// The GPUs a plan runs on, as cluster files (configs/clusters/*.toml, compiled in; a user's file
// is read the same way): dense peak FLOP/s per precision, HBM size and bandwidth, SM count, the
// NVLink (scale-up) domain and the scale-out link with their bandwidth and latency, price and
// failure rate, and the generation's efficiency constants. Every figure carries its source in
// the file (a datasheet, a paper, "calibrated on X" or "assumption").
//
// Invariants: all rates are per GPU, in SI units (FLOP/s, bytes, bytes/s, seconds, USD per
// GPU-hour, failures per GPU-hour); a precision a GPU lacks has peak 0 and is refused by the
// planner with the precisions it has.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace trillion::plan {

enum class Precision { kBf16, kFp16, kFp8, kFp4 };
std::string precision_name(Precision p);
Precision parse_precision(const std::string& name);  // "bf16", "fp16", "fp8", "fp4"

struct Gpu {
  std::string name;        // catalog key, e.g. "h100"
  std::string model;       // e.g. "H100 SXM"
  std::string generation;  // "ampere", "hopper", "blackwell"
  double bf16_flops = 0, fp16_flops = 0, fp8_flops = 0, fp4_flops = 0;  // dense peak, FLOP/s
  double hbm_bytes = 0, hbm_bandwidth = 0;                              // bytes, bytes/s
  int sm_count = 132;                                                   // streaming multiprocessors
  int nvlink_domain = 8;                                                // GPUs per NVLink domain
  double nvlink_bandwidth = 0;    // per GPU, bidirectional (the datasheet figure), bytes/s
  double nvlink_latency = 0;      // alpha of one NVLink collective step, seconds
  double scaleout_bandwidth = 0;  // per GPU, one direction, bytes/s
  double scaleout_latency = 0;    // alpha of one scale-out step, seconds
  double usd_per_gpu_hour = 0;
  double failures_per_gpu_hour = 0;  // unexpected interruptions attributed per GPU
  double overhead_bytes = 3e9;       // CUDA context, NCCL buffers, library workspaces
  // Efficiency constants of the generation (plan/efficiency.h uses them).
  double gemm_efficiency = 0.8;  // achievable fraction of dense peak, large GEMMs
  // FP8/FP4 GEMMs, when their kernels differ from the 16-bit ones: Hopper's fine-grained FP8
  // (1x128 activation tiles, 128x128 weight blocks, fp32 promotion on CUDA cores every 128 of K;
  // DeepSeek-V3 §3.3.2) reaches a different fraction of FP8's peak and pays more per K step.
  // Cluster file [efficiency] fp8_gemm and fp8_gemm_k_overhead; absent: gemm_efficiency and
  // the 16-bit K overhead (128).
  double fp8_gemm_efficiency = 0;  // 0: as gemm_efficiency
  double fp8_gemm_k_overhead = 0;  // 0: as the 16-bit kernels' (plan/efficiency.h kGemmKOverhead)
  double attention_efficiency = 0.5;   // FlashAttention forward + backward, of the 16-bit peak
  // FlashAttention's forward alone (inference prefill), where a source gives it for this part
  // (cluster file [efficiency] attention_forward); 0: as attention_efficiency.
  double attention_forward_efficiency = 0;
  double memory_efficiency = 0.8;      // achievable fraction of HBM bandwidth (elementwise)
  double collective_efficiency = 0.8;  // NCCL bus bandwidth over link bandwidth
  // Where each figure comes from, by key (e.g. "price", "failures", "gemm").
  std::vector<std::pair<std::string, std::string>> sources;
  std::string file;  // the cluster file it was read from

  double peak(Precision p) const;
  std::string source_of(std::string_view key) const;  // "" when none given
  std::string precisions() const;                     // "bf16, fp16, fp8"
};

// A cluster file's text; `source` names it in messages.
Gpu parse_cluster_toml(std::string_view text, std::string_view source);
Gpu read_cluster_file(const std::string& path);

// The catalog (configs/clusters/*.toml): a100, h100, h800, h200, b200, gb200-nvl72; unknown
// names throw listing it.
const Gpu& find_gpu(const std::string& name);
const std::vector<Gpu>& gpu_catalog();
// A catalog name or a path (anything with '/' or ending in .toml).
Gpu resolve_cluster(const std::string& name_or_path);

}  // namespace trillion::plan
