// See bench_machine.h. Only rank 0 writes the file; the others take part in the ping-pongs (rank 0
// with a rank on its host, and with a rank on another host when the job spans hosts).
#include "cli/bench_machine.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "backend/cpu/onednn_bf16.h"
#include "comm/hosts.h"
#include "comm/mpi_communicator.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "core/timer.h"
#include "plan/hardware.h"
#include "train/gemm_peak.h"

namespace trillion::cli {
namespace {

// Best of reps square bf16 GEMMs (oneDNN), or 0 where the CPU has no native bf16.
double bf16_gemm_flops(int64_t n, int reps) {
  if (!onednn_bf16_available()) return 0;
  std::vector<bf16> a(n * n, float_to_bf16(0.5f)), b(n * n, float_to_bf16(0.25f));
  std::vector<float> c(n * n);
  double best = 1e30;
  for (int r = 0; r <= reps; ++r) {
    Timer t;
    onednn_bf16_gemm(false, true, n, n, n, a.data(), n, b.data(), n, 1.0f, 0.0f, c.data(), n);
    if (r > 0) best = std::min(best, t.seconds());  // the first is the warm-up
  }
  return 2.0 * n * n * n / best;
}

// Copy bandwidth: bytes read + written per second, best of reps (OpenMP-parallel copy).
double copy_bandwidth(double megabytes, int reps) {
  const auto n = static_cast<int64_t>(megabytes * 1e6 / sizeof(double));
  std::vector<double> a(n, 1.0), b(n, 0.0);
  double best = 1e30;
  for (int r = 0; r <= reps; ++r) {
    Timer t;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) b[i] = a[i];
    if (r > 0) best = std::min(best, t.seconds());
  }
  if (b[n / 2] != 1.0) throw Error("bench machine: the copy probe did not copy");
  return 2.0 * static_cast<double>(n) * sizeof(double) / best;
}

struct PingPong {
  double latency = 0, bandwidth = 0;  // seconds one way; bytes/s one way
};

// Rank 0 and rank `peer` bounce a message: half the round trip of 8 bytes is the latency, 64 MB
// over half the round trip the bandwidth. Every rank calls it (the others wait at the barriers).
PingPong ping_pong(comm::Communicator& world, int peer, int reps) {
  PingPong out;
  auto bounce = [&](int64_t bytes, int count) {
    std::vector<float> buf(std::max<int64_t>(1, bytes / 4));
    const Tensor t(buf.data(), DType::f32, {static_cast<int64_t>(buf.size())});
    double best = 1e30;
    for (int r = 0; r <= count; ++r) {
      world.barrier();
      Timer timer;
      if (world.rank() == 0) {
        world.send(t, peer), world.recv(t, peer);
      } else if (world.rank() == peer) {
        world.recv(t, 0), world.send(t, 0);
      }
      if (r > 0) best = std::min(best, timer.seconds() / 2);
    }
    return best;
  };
  out.latency = bounce(8, 20 * reps);
  const int64_t big = int64_t{64} << 20;
  out.bandwidth = static_cast<double>(big) / bounce(big, reps);
  return out;
}

// The job's links as rank 0 sees them: to the first other rank on its host (the "NVLink
// domain": shared memory) and to the first rank on another host (TCP between hosts made by
// scripts/hosts.sh, or a real network); either is absent (measured = false) when no such rank.
struct Links {
  PingPong intra, inter;
  bool intra_measured = false, inter_measured = false;
  int ranks = 1, ranks_per_host = 1, hosts = 1;
};

Links measure_links(comm::Communicator& world, int reps) {
  Links l;
  l.ranks = world.size();
  const comm::JobHosts job = comm::exchange_hosts(world);
  l.hosts = job.hosts();
  int same = -1, other = -1;
  for (int q = 1; q < world.size(); ++q) {
    const bool here = job.host_of_rank[q] == job.host_of_rank[0];
    if (here) ++l.ranks_per_host;
    if (here && same < 0) same = q;
    if (!here && other < 0) other = q;
  }
  if (same >= 0) l.intra = ping_pong(world, same, reps), l.intra_measured = true;
  if (other >= 0) l.inter = ping_pong(world, other, reps), l.inter_measured = true;
  return l;
}

}  // namespace

int bench_machine(const MachineBenchOptions& o, bool json) {
  if (o.out.empty()) throw Error("bench machine needs --out FILE (the cluster file to write)");
  std::unique_ptr<comm::MpiRuntime> runtime;
  int rank = 0;
  Links links;
  if (comm::launch_environment().found) {
    runtime = std::make_unique<comm::MpiRuntime>();
    rank = runtime->world().rank();
    links = measure_links(runtime->world(), o.reps);
  }
  if (rank != 0) return 0;
  const GemmPeak fp32 = measure_gemm_peak(o.gemm_size, o.reps);
  const double bf16 = bf16_gemm_flops(o.gemm_size, o.reps);
  const double copy = copy_bandwidth(o.copy_megabytes, o.reps);
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  const double ram = static_cast<double>(pages) * static_cast<double>(page);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  // Without a second rank on this host the link figures are the copy bandwidth and 1 us, said as
  // such; without a second host the scale-out link is the same as the one inside the host.
  const PingPong intra = links.intra_measured ? links.intra : PingPong{1e-6, copy / 2};
  const PingPong inter = links.inter_measured ? links.inter : intra;
  const double bf16_flops = bf16 > 0 ? bf16 : fp32.gflops * 1e9;
  const std::string gemm_words =
      fmt::format("measured by trillion bench machine: best of {} {}^3 GEMMs on {} threads", o.reps,
                  o.gemm_size, fp32.threads);
  const std::string how = "(8 B for latency, 64 MiB for bandwidth, half the round trip)";
  const std::string link_words =
      links.intra_measured
          ? fmt::format(
                "measured by trillion bench machine: MPI ping-pong between two of the {} "
                "ranks on one host {}",
                links.ranks_per_host, how)
          : "not measured (no second rank on the host: run under trillion launch -n 2); the copy "
            "bandwidth and 1 us stand in";
  const std::string scaleout_words =
      links.inter_measured
          ? fmt::format(
                "measured by trillion bench machine: MPI ping-pong between ranks on two "
                "of the job's {} hosts {}",
                links.hosts, how)
          : "no second host in the job: the link inside the host stands in";
  std::string text = fmt::format(
      "# This machine as `trillion bench machine` measured it: GEMM peaks with the engine's "
      "BLAS/oneDNN,\n# memory copy bandwidth and the MPI link between ranks on this host. fp32 "
      "GEMM peak: {:.1f} GFLOP/s\n# (the planner plans 16-bit and lower precisions: its bf16 peak "
      "is{}).\n"
      "[gpu]\nname = \"this-machine\"\nmodel = \"this machine ({} threads)\"\ngeneration = "
      "\"cpu\"\nsm_count = {}\nhbm_gb = {:.3f}\nhbm_tb_per_s = {:.6f}\nhbm_source = \"memory "
      "size from sysconf; bandwidth measured by trillion bench machine: an OpenMP copy of {:.0f} "
      "MB, bytes read + written\"\noverhead_gb = 0.2\noverhead_source = \"assumption: MPI and "
      "allocator reservations of a CPU process\"\n\n"
      "[peak_tflops]\nbf16 = {:.6f}\nfp16 = 0\nfp8 = 0\nfp4 = 0\nbf16_source = \"{}{}\"\n\n"
      "[efficiency]\ngemm = 1.0\ngemm_source = \"the peak above is the measured GEMM rate at "
      "this size\"\nattention = 0.5\nattention_source = \"assumption\"\nmemory = 1.0\n"
      "memory_source = \"the bandwidth above is measured\"\ncollective = 1.0\ncollective_source "
      "= \"the link below is measured\"\n\n"
      "[network]\nnvlink_domain = {}\nnvlink_gb_per_s = {:.6f}\nnvlink_latency_us = {:.3f}\n"
      "scaleout_gb_per_s = {:.6f}\nscaleout_latency_us = {:.3f}\nnvlink_source = \"{} (the "
      "file's NVLink figure counts both directions: twice the one-way rate)\"\nscaleout_source = "
      "\"{}\"\nlatency_source = \"{}; {}\"\n\n"
      "[cost]\nusd_per_gpu_hour = 0\nfailures_per_1000_gpu_days = 0\nprice_source = \"not "
      "priced\"\n",
      fp32.gflops, bf16 > 0 ? " oneDNN's bf16 GEMM" : " the fp32 GEMM's: no native bf16 here",
      cores, cores, ram / 1e9, copy / 1e12, o.copy_megabytes, bf16_flops / 1e12, gemm_words,
      bf16 > 0 ? " (oneDNN bf16)" : " (fp32 GEMM; no native bf16 on this CPU)",
      links.hosts > 1 ? links.ranks_per_host : std::max(links.ranks, 2), 2 * intra.bandwidth / 1e9,
      intra.latency * 1e6, inter.bandwidth / 1e9, inter.latency * 1e6, link_words, scaleout_words,
      link_words, scaleout_words);
  plan::parse_cluster_toml(text, o.out);  // what we write must read back
  std::ofstream file(o.out);
  if (!file) throw Error(fmt::format("--out {}: cannot open the file for writing", o.out));
  file << text;
  if (json) {
    std::cout
        << nlohmann::json{{"out", o.out},
                          {"fp32_gemm_gflops", fp32.gflops},
                          {"bf16_gemm_gflops", bf16 / 1e9},
                          {"copy_gb_per_s", copy / 1e9},
                          {"mpi_ranks", links.ranks},
                          {"hosts", links.hosts},
                          {"mpi_latency_us", links.intra_measured ? intra.latency * 1e6 : 0.0},
                          {"mpi_gb_per_s", links.intra_measured ? intra.bandwidth / 1e9 : 0.0},
                          {"inter_host_latency_us",
                           links.inter_measured ? inter.latency * 1e6 : 0.0},
                          {"inter_host_gb_per_s",
                           links.inter_measured ? inter.bandwidth / 1e9 : 0.0}}
               .dump(2)
        << "\n";
  } else {
    std::cout << fmt::format(
        "fp32 GEMM {:.1f} GFLOP/s, bf16 GEMM {}, copy {:.1f} GB/s, MPI {}{}; cluster file written "
        "to {} (trillion plan --cluster {})\n",
        fp32.gflops, bf16 > 0 ? fmt::format("{:.1f} GFLOP/s", bf16 / 1e9) : "not native",
        copy / 1e9,
        links.intra_measured ? fmt::format("{:.2f} us, {:.2f} GB/s between 2 ranks of a host",
                                           intra.latency * 1e6, intra.bandwidth / 1e9)
                             : "not measured inside a host",
        links.inter_measured ? fmt::format(", {:.2f} us, {:.3f} GB/s between hosts",
                                           inter.latency * 1e6, inter.bandwidth / 1e9)
                             : "",
        o.out, o.out);
  }
  return 0;
}

}  // namespace trillion::cli
