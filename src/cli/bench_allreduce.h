// `trillion bench allreduce`: the measured time of the engine's all-reduce algorithms (mpi, ring,
// hierarchical) under emulated slow links between sites, next to the alpha-beta model of
// plan/collectives.h with the same links, and the bytes each rank moved next to the model's.
// With --host-gbps the links are real (hosts made by scripts/hosts.sh, docs/multi-host.md).
// Runs under a launcher (`trillion launch -n N -- bench allreduce ...`); one process is a group
// of one and measures nothing.
#pragma once

#include <string>

namespace trillion::cli {

struct AllReduceBenchOptions {
  std::string algorithm = "all";  // mpi, ring, hierarchical or all
  double megabytes = 16;          // fp32 buffer per rank, MB (1e6 bytes)
  int sites = 2;                  // emulated sites of equal size; 1: no emulation
  double latency_ms = 5;          // one way, between sites
  double gbps = 10;               // between sites, per link (rank pair), per direction
  int ranks_per_node = 0;         // hierarchical's node size; 0: one node per site
  int reps = 5;                   // timed repetitions after one warm-up (median reported)
  // > 0: the job runs on real hosts (trillion launch --hostfile, scripts/hosts.sh --gbps G) whose
  // NICs carry G Gb/s each way: no emulation, a node is a host, the model's links between hosts
  // are G Gb/s (alpha 0) and inside a host this machine's shared-memory ring.
  double host_gbps = 0;
};

int bench_allreduce(const AllReduceBenchOptions& options, bool json);

}  // namespace trillion::cli
