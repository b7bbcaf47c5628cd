// See hardware.h. Peaks are NVIDIA's dense (no sparsity) datasheet figures as listed in
// REFERENCE.md; B200 and A100 from their datasheets. Prices are assumptions (REFERENCE.md uses
// $2/GPU-hour for H100/H800); failure rates scale Llama 3's Hopper rate as noted per GPU.
#include "plan/hardware.h"

#include <fmt/format.h>

#include "core/error.h"

namespace trillion::plan {

std::string precision_name(Precision p) {
  switch (p) {
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp8:
      return "fp8";
    case Precision::kFp4:
      return "fp4";
  }
  return "?";
}

Precision parse_precision(const std::string& name) {
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp8") return Precision::kFp8;
  if (name == "fp4") return Precision::kFp4;
  throw Error(fmt::format("unknown precision '{}': use bf16, fp8 or fp4", name));
}

double Gpu::peak(Precision p) const {
  switch (p) {
    case Precision::kBf16:
      return bf16_flops;
    case Precision::kFp8:
      return fp8_flops;
    case Precision::kFp4:
      return fp4_flops;
  }
  return 0;
}

namespace {

constexpr double kT = 1e12, kG = 1e9;

std::vector<Gpu> build() {
  const double hopper = kHopperFailuresPerGpuHour;
  return {
      {"h100", "H100 SXM", 989 * kT, 1979 * kT, 0, 80 * kG, 3.35e12, 8, 900 * kG, 50 * kG, 2.0,
       hopper,
       "$2/GPU-hour as in REFERENCE.md; failure rate from Llama 3's 16K-GPU run; 400 Gb/s "
       "RoCE/IB per GPU"},
      {"h800", "H800", 989 * kT, 1979 * kT, 0, 80 * kG, 3.35e12, 8, 400 * kG, 50 * kG, 2.0, hopper,
       "$2/GPU-hour as DeepSeek-V3 assumes; NVLink 400 GB/s (~160 GB/s achieved)"},
      {"h200", "H200", 989 * kT, 1979 * kT, 0, 141 * kG, 4.8e12, 8, 900 * kG, 50 * kG, 2.5, hopper,
       "assumed $2.5/GPU-hour (H100 + 25% for the larger HBM); Hopper failure rate"},
      {"b200", "B200 (HGX)", 2250 * kT, 4500 * kT, 9000 * kT, 180 * kG, 8e12, 8, 1800 * kG, 50 * kG,
       3.5, 1.5 * hopper, "assumed $3.5/GPU-hour; failure rate assumed 1.5x Hopper (new platform)"},
      {"gb200-nvl72", "GB200 NVL72", 2500 * kT, 5000 * kT, 10000 * kT, 186 * kG, 8e12, 72,
       1800 * kG, 50 * kG, 4.0, 1.5 * hopper,
       "assumed $4/GPU-hour; failure rate assumed 1.5x Hopper (new platform, rack-scale NVLink)"},
      {"a100", "A100 SXM 80GB", 312 * kT, 0, 0, 80 * kG, 2.04e12, 8, 600 * kG, 25 * kG, 1.2, hopper,
       "assumed $1.2/GPU-hour; 200 Gb/s per GPU; no FP8; Hopper failure rate"},
  };
}

}  // namespace

const std::vector<Gpu>& gpu_catalog() {
  static const std::vector<Gpu> catalog = build();
  return catalog;
}

const Gpu& find_gpu(const std::string& name) {
  std::string names;
  for (const Gpu& g : gpu_catalog()) {
    if (g.name == name) return g;
    names += (names.empty() ? "" : ", ") + g.name;
  }
  throw Error(fmt::format("unknown cluster '{}': use one of {}", name, names));
}

}  // namespace trillion::plan
