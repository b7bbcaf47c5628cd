// See collectives.h.
#include "plan/collectives.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace trillion::plan {

namespace {

void validate(const AlphaBeta& link, const char* which) {
  if (!(link.latency_s >= 0) || !(link.bytes_per_second > 0)) {
    throw Error(fmt::format("{} link: latency {} s must be >= 0 and bandwidth {} bytes/s > 0",
                            which, link.latency_s, link.bytes_per_second));
  }
}

// The link every step of a topology-oblivious algorithm waits for.
const AlphaBeta& slowest(const Topology& t) {
  return t.nodes > 1 ? t.inter : t.intra;
}

int ceil_log2(int p) {
  int s = 0;
  while ((1 << s) < p) ++s;
  return s;
}

}  // namespace

std::string all_reduce_kind_name(AllReduceKind k) {
  switch (k) {
    case AllReduceKind::kMpi:
      return "mpi";
    case AllReduceKind::kRing:
      return "ring";
    case AllReduceKind::kHierarchical:
      return "hierarchical";
  }
  return "?";
}

AllReduceKind parse_all_reduce_kind(const std::string& name) {
  for (auto k : {AllReduceKind::kMpi, AllReduceKind::kRing, AllReduceKind::kHierarchical}) {
    if (name == all_reduce_kind_name(k)) return k;
  }
  throw Error(
      fmt::format("all-reduce algorithm '{}' is unknown; use mpi, ring or hierarchical", name));
}

CollectiveCost all_reduce_cost(AllReduceKind kind, double bytes, const Topology& t) {
  if (t.ranks_per_node < 1 || t.nodes < 1) {
    throw Error(fmt::format("topology of {} ranks per node x {} nodes: both must be >= 1",
                            t.ranks_per_node, t.nodes));
  }
  if (t.ranks_per_node > 1) validate(t.intra, "intra-node");
  if (t.nodes > 1) validate(t.inter, "inter-node");
  const int p = t.ranks();
  CollectiveCost c;
  if (p == 1) return c;
  const double share = 2.0 * (p - 1) / p * bytes;
  switch (kind) {
    case AllReduceKind::kRing: {
      const AlphaBeta& link = slowest(t);
      c.steps = 2 * (p - 1);
      c.seconds = c.steps * link.seconds(bytes / p);
      c.bytes_per_rank = share;
      c.inter_node_bytes_per_rank = t.nodes > 1 ? share : 0;
      return c;
    }
    case AllReduceKind::kHierarchical: {
      const int m = t.ranks_per_node, k = t.nodes;
      c.steps = 2 * (m - 1) + 2 * (k - 1);
      const double in_node = m > 1 ? 2.0 * (m - 1) * t.intra.seconds(bytes / m) : 0.0;
      const double across = k > 1 ? 2.0 * (k - 1) * t.inter.seconds(bytes / m / k) : 0.0;
      c.seconds = in_node + across;
      c.inter_node_bytes_per_rank = 2.0 * (k - 1) / k * bytes / m;
      c.bytes_per_rank = 2.0 * (m - 1) / m * bytes + c.inter_node_bytes_per_rank;
      return c;
    }
    case AllReduceKind::kMpi: {
      const AlphaBeta& link = slowest(t);
      const int rounds = ceil_log2(p);
      const double doubling = rounds * link.seconds(bytes);
      const double rabenseifner = 2.0 * rounds * link.latency_s + share / link.bytes_per_second;
      const bool short_message = doubling < rabenseifner;
      c.steps = short_message ? rounds : 2 * rounds;
      c.seconds = std::min(doubling, rabenseifner);
      c.bytes_per_rank = short_message ? rounds * bytes : share;
      c.inter_node_bytes_per_rank = t.nodes > 1 ? c.bytes_per_rank : 0;
      return c;
    }
  }
  return c;
}

CollectiveCost ring_reduce_scatter_cost(double bytes, const Topology& t) {
  CollectiveCost c = all_reduce_cost(AllReduceKind::kRing, bytes, t);
  c.seconds /= 2;
  c.bytes_per_rank /= 2;
  c.inter_node_bytes_per_rank /= 2;
  c.steps /= 2;
  return c;
}

}  // namespace trillion::plan
