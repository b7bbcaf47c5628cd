// The hardware catalog: per-GPU dense peak FLOP/s by precision, HBM size and bandwidth, the
// NVLink (scale-up) domain and its bandwidth, scale-out bandwidth per GPU, a default price and
// a failure rate. Every figure cites where it comes from or says it is an assumption.
//
// Invariants: all rates are per GPU, in SI units (FLOP/s, bytes, bytes/s, USD per GPU-hour,
// failures per GPU-hour); a precision a GPU lacks has peak 0 and is rejected by the planner.
#pragma once

#include <string>
#include <vector>

namespace trillion::plan {

enum class Precision { kBf16, kFp8, kFp4 };
std::string precision_name(Precision p);
Precision parse_precision(const std::string& name);  // "bf16", "fp8", "fp4"

struct Gpu {
  std::string name;                                     // catalog key, e.g. "h100"
  std::string model;                                    // e.g. "H100 SXM"
  double bf16_flops = 0, fp8_flops = 0, fp4_flops = 0;  // dense peak, FLOP/s
  double hbm_bytes = 0, hbm_bandwidth = 0;              // bytes, bytes/s
  int nvlink_domain = 8;                                // GPUs per NVLink domain
  double nvlink_bandwidth = 0;    // per GPU, bidirectional (the datasheet figure), bytes/s
  double scaleout_bandwidth = 0;  // per GPU, one direction, bytes/s
  double usd_per_gpu_hour = 0;
  double failures_per_gpu_hour = 0;  // unexpected interruptions attributed per GPU
  std::string notes;                 // where price and failure rate come from

  double peak(Precision p) const;
};

// h100, h800, h200, b200, gb200-nvl72, a100; unknown names throw listing the catalog.
const Gpu& find_gpu(const std::string& name);
const std::vector<Gpu>& gpu_catalog();

// Llama 3's observed rate (2407.21783 §3.3.4): 419 unexpected interruptions in 54 days on
// 16,384 GPUs = 4.74e-4 per GPU-day, which we round to 0.47 per 1,000 GPU-days.
constexpr double kHopperFailuresPerGpuHour = 0.47e-3 / 24.0;

}  // namespace trillion::plan
