// See bench_allreduce.h. Each repetition starts after a world barrier (not emulated) and takes
// the slowest rank's time; the median of the repetitions is reported. Links inside a site are not
// emulated: the model prices them at the bandwidth this machine's ring all-reduce reaches in
// shared memory (the best of 4 x reps runs, measured first; alpha taken as 0). Between real hosts
// (--host-gbps) the model takes the NICs' configured rate and an alpha measured first by a
// one-float ping-pong across the host boundary. The "no-link" column is each algorithm run
// without the emulator.
#include "cli/bench_allreduce.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "comm/algorithms/algorithm_communicator.h"
#include "comm/hosts.h"
#include "comm/link_emulator.h"
#include "comm/mpi_communicator.h"
#include "core/error.h"
#include "plan/collectives.h"

namespace trillion::cli {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Alpha between hosts: the median half round trip of a one-float ping-pong between rank 0 and
// rank `peer` (the first rank of the second host), over `reps` exchanges after one warm-up; every
// rank returns it.
double host_latency_seconds(comm::Communicator& world, int peer, int reps) {
  const int r = world.rank();
  float x = 0;
  const Tensor t(&x, DType::f32, {1});
  std::vector<double> half_trips;
  world.barrier();
  for (int rep = 0; rep <= reps && (r == 0 || r == peer); ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    if (r == 0) {
      world.send(t, peer);
      world.recv(t, peer);
    } else {
      world.recv(t, 0);
      world.send(t, 0);
    }
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) half_trips.push_back(dt / 2);
  }
  double alpha = r == 0 ? median(half_trips) : 0.0;
  world.all_reduce(Tensor(&alpha, DType::f64, {1}), comm::ReduceOp::max);
  return alpha;
}

plan::AllReduceKind kind_of(comm::AllReduceAlgorithm a) {
  switch (a) {
    case comm::AllReduceAlgorithm::mpi:
      return plan::AllReduceKind::kMpi;
    case comm::AllReduceAlgorithm::ring:
      return plan::AllReduceKind::kRing;
    case comm::AllReduceAlgorithm::hierarchical:
      return plan::AllReduceKind::kHierarchical;
  }
  return plan::AllReduceKind::kMpi;
}

}  // namespace

int bench_allreduce(const AllReduceBenchOptions& o, bool json) {
  if (!comm::launch_environment().found) {
    throw Error(
        "bench allreduce measures a group of processes; run it under a launcher: trillion "
        "launch -n 4 -- bench allreduce ...");
  }
  comm::MpiRuntime runtime;
  comm::Communicator& world = runtime.world();
  const int n = world.size(), r = world.rank();
  if (o.sites < 1 || n % o.sites != 0) {
    throw Error(fmt::format("--sites {} must divide the job's {} processes", o.sites, n));
  }
  const bool real_hosts = o.host_gbps > 0;
  const comm::JobHosts hosts = comm::exchange_hosts(world);  // collective; counted nowhere used
  if (real_hosts) {
    if (o.sites != 1) throw Error("--host-gbps measures real links: give --sites 1");
    for (int q = 0; q < n; ++q) {
      if (hosts.host_of_rank[q] != q / (n / hosts.hosts())) {
        throw Error(fmt::format(
            "--host-gbps needs the same number of ranks on every host, in blocks ({} ranks on "
            "{} hosts); give every host the same slots",
            n, hosts.hosts()));
      }
    }
  }
  const int per_site = n / o.sites;
  const int rpn = real_hosts             ? n / hosts.hosts()
                  : o.ranks_per_node > 0 ? o.ranks_per_node
                                         : per_site;
  if (o.sites > 1 && rpn != per_site) {
    throw Error(fmt::format(
        "with emulated sites a node is a site: --ranks-per-node must be {} (processes / sites)",
        per_site));
  }
  if (per_site % rpn != 0) {
    throw Error(
        fmt::format("--ranks-per-node {} must divide the {} ranks of each site", rpn, per_site));
  }
  if (!(o.megabytes > 0) || !(o.latency_ms >= 0) || !(o.gbps > 0)) {
    throw Error("--mb and --gbps must be > 0 and --latency-ms >= 0");
  }
  std::vector<comm::AllReduceAlgorithm> algorithms;
  if (o.algorithm == "all") {
    algorithms = {comm::AllReduceAlgorithm::mpi, comm::AllReduceAlgorithm::ring,
                  comm::AllReduceAlgorithm::hierarchical};
  } else {
    algorithms = {comm::parse_algorithm(o.algorithm, "--algorithm")};
  }
  const comm::LinkModel slow{o.latency_ms / 1e3, o.gbps * 1e9 / 8};
  const int site = r / per_site;
  const int64_t count = std::max<int64_t>(1, static_cast<int64_t>(o.megabytes * 1e6 / 4));
  const double bytes = 4.0 * static_cast<double>(count);

  nlohmann::json results = nlohmann::json::array();
  if (r == 0 && !json && real_hosts) {
    std::printf(
        "all-reduce of %.1f MB fp32 on %d ranks, %d host(s) with %.2f Gb/s NICs, %d "
        "ranks per host\n",
        bytes / 1e6, n, hosts.hosts(), o.host_gbps, rpn);
  } else if (r == 0 && !json) {
    std::printf("all-reduce of %.1f MB fp32 on %d ranks, %d site(s)%s, %d ranks per node\n",
                bytes / 1e6, n, o.sites,
                o.sites > 1
                    ? fmt::format(" linked at {:.1f} ms, {:.1f} Gb/s", o.latency_ms, o.gbps).c_str()
                    : "",
                rpn);
  }
  // The times of `reps` all-reduces of `count` floats by algorithm `a`, with or without the
  // emulated links; checks the result and returns the bytes the rank sent.
  const auto measure = [&](comm::AllReduceAlgorithm a, bool emulate, uint64_t* sent, int reps,
                           int color = -1) {
    // color >= 0: only the ranks of that color (a host) run it together.
    std::unique_ptr<comm::Communicator> group = world.split(std::max(color, 0), r, "bench");
    const int members = group->size();
    if (emulate) group = std::make_unique<comm::LinkEmulator>(std::move(group), site, slow);
    // The node of a rank: consecutive blocks of rpn (so nodes never straddle sites).
    group = std::make_unique<comm::AlgorithmCommunicator>(
        std::move(group), a, real_hosts ? hosts.host_of_rank[r] : r / rpn);
    std::vector<float> data(static_cast<size_t>(count), 1.0f);
    const Tensor t(data.data(), DType::f32, {count});
    std::vector<double> times;
    for (int rep = 0; rep <= reps; ++rep) {
      std::fill(data.begin(), data.end(), 1.0f);
      world.barrier();
      const comm::CommCounters before = group->counters();
      const auto t0 = std::chrono::steady_clock::now();
      group->all_reduce(t);
      std::vector<double> dt = {
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
      world.all_reduce(Tensor(dt.data(), DType::f64, {1}), comm::ReduceOp::max);
      if (data[0] != static_cast<float>(members) ||
          data[count - 1] != static_cast<float>(members)) {
        throw Error(fmt::format("bench allreduce: {} gave {} instead of {}",
                                comm::algorithm_name(a), data[0], members));
      }
      *sent = (group->counters() - before).sent(comm::Collective::all_reduce);
      if (rep > 0) times.push_back(dt[0]);  // the first is a warm-up
    }
    return times;
  };
  // The model's links: between sites the emulated ones; inside a site (not emulated) the
  // bandwidth this machine's own ring all-reduce reaches without the emulator, measured here.
  uint64_t unused = 0;
  // The best of many runs: a busy machine can only slow a run down, and the other ranks of this
  // job share its cores.
  // On real hosts the whole job's ring crosses NICs: inside a host the model uses the ring of
  // one host's ranks (1 rank per host: unused).
  plan::Topology topo;
  topo.ranks_per_node = rpn;
  topo.nodes = n / rpn;
  if (!real_hosts || rpn > 1) {
    const std::vector<double> local_runs =
        measure(comm::AllReduceAlgorithm::ring, false, &unused, 4 * o.reps,
                real_hosts ? hosts.host_of_rank[r] : 0);
    const double local_ring = *std::min_element(local_runs.begin(), local_runs.end());
    const int m = real_hosts ? rpn : n;
    topo.intra = {0, 2.0 * (m - 1) / m * bytes / local_ring};
  } else {
    topo.intra = {0, 1e12};
  }
  // Between real hosts: the NICs' configured rate and the latency measured now (per message:
  // the TCP stacks, the MPI transport and waking the process on a shared machine).
  const double host_alpha =
      real_hosts && hosts.hosts() > 1 ? host_latency_seconds(world, rpn, 20 * o.reps) : 0.0;
  topo.inter = real_hosts    ? plan::AlphaBeta{host_alpha, o.host_gbps * 1e9 / 8}
               : o.sites > 1 ? plan::AlphaBeta{slow.latency_s, slow.bytes_per_second}
                             : topo.intra;
  if (r == 0 && !json) {
    if (real_hosts) {
      std::printf(
          "between hosts: %.3f GB/s (the NICs' rate), alpha %.1f us (one-float ping-pong, "
          "median); inside a host: %s\n",
          topo.inter.bytes_per_second / 1e9, host_alpha * 1e6,
          rpn > 1 ? fmt::format("{:.2f} GB/s (a host's ring in shared memory)",
                                topo.intra.bytes_per_second / 1e9)
                        .c_str()
                  : "one rank");
    } else {
      std::printf(
          "inside a site: %.2f GB/s (this machine's ring all-reduce without the "
          "emulator)\n",
          topo.intra.bytes_per_second / 1e9);
    }
    std::printf("%-13s %12s %12s %8s %12s %16s %16s\n", "algorithm", "measured ms", "model ms",
                "ratio", "no-link ms", "bytes/rank", "model bytes");
  }
  for (const comm::AllReduceAlgorithm a : algorithms) {
    // MPI's own collective does not go through send/recv: under the emulator its time would be
    // the emulator's model, not a measurement.
    if (a == comm::AllReduceAlgorithm::mpi && o.sites > 1) {
      if (r == 0 && !json) std::printf("%-13s (not measurable under the link emulator)\n", "mpi");
      continue;
    }
    uint64_t sent = 0, sent_local = 0;
    const double measured = median(measure(a, o.sites > 1, &sent, o.reps));
    const double local = o.sites > 1 ? median(measure(a, false, &sent_local, o.reps)) : measured;
    // plan/'s inter-node rate is per rank (a GPU cluster has a NIC per GPU); an emulated host has
    // one NIC for its rpn ranks. A ring crosses each NIC once per direction, but hierarchical's
    // middle phase sends from every rank of a host at once: they share the NIC.
    plan::Topology link_topo = topo;
    if (real_hosts && a == comm::AllReduceAlgorithm::hierarchical)
      link_topo.inter.bytes_per_second /= rpn;
    const plan::CollectiveCost model = plan::all_reduce_cost(kind_of(a), bytes, link_topo);
    if (r == 0) {
      if (json) {
        results.push_back({{"algorithm", comm::algorithm_name(a)},
                           {"measured_seconds", measured},
                           {"model_seconds", model.seconds},
                           {"no_link_seconds", local},
                           {"bytes_per_rank", sent},
                           {"model_bytes_per_rank", model.bytes_per_rank}});
      } else {
        std::printf("%-13s %12.2f %12.2f %8.3f %12.2f %16llu %16.0f\n",
                    std::string(comm::algorithm_name(a)).c_str(), measured * 1e3,
                    model.seconds * 1e3, model.seconds > 0 ? measured / model.seconds : 0.0,
                    local * 1e3, static_cast<unsigned long long>(sent), model.bytes_per_rank);
      }
    }
  }
  if (r == 0 && json) {
    std::printf("%s\n", nlohmann::json{{"ranks", n},
                                       {"sites", o.sites},
                                       {"ranks_per_node", rpn},
                                       {"bytes", bytes},
                                       {"latency_ms", o.latency_ms},
                                       {"gbps", o.gbps},
                                       {"host_gbps", o.host_gbps},
                                       {"host_latency_seconds", host_alpha},
                                       {"hosts", hosts.hosts()},
                                       {"intra_site_bytes_per_second", topo.intra.bytes_per_second},
                                       {"results", results}}
                            .dump()
                            .c_str());
  }
  return 0;
}

}  // namespace trillion::cli
