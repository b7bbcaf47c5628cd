// `trillion bench machine --out FILE`: this machine measured by trillion and written as a
// cluster file that `trillion plan --cluster FILE` reads (plan/hardware.h): the fp32 GEMM peak
// with the engine's BLAS (train/gemm_peak.h), the bf16 GEMM peak (oneDNN where the CPU has
// native bf16, else the fp32 GEMM of rounded operands, as `bench gemm --dtype bf16` measures),
// memory copy bandwidth, and, under `trillion launch -n 2`, the MPI latency and bandwidth
// between two ranks of this host (ping-pong). Every figure's _source says it was measured (or,
// for what one process cannot measure, that it was not).
#pragma once

#include <cstdint>
#include <string>

namespace trillion::cli {

struct MachineBenchOptions {
  std::string out;              // the cluster file to write
  int64_t gemm_size = 1024;     // square GEMM size of both peaks
  double copy_megabytes = 256;  // per buffer of the copy-bandwidth probe
  int reps = 3;                 // best of reps, after a warm-up
};

int bench_machine(const MachineBenchOptions& options, bool json);

}  // namespace trillion::cli
