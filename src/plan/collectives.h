// The alpha-beta cost model of all-reduce (and its halves) for the three algorithms the engine
// can run (comm/algorithms): the MPI library's own, the ring, and the two-level hierarchical one.
// A message of n bytes on a link takes alpha + n / beta (Hockney 1994); an algorithm's time is
// its number of sequential steps times alpha plus the bytes of its busiest rank over beta.
//
// Closed forms (p ranks = m per node x k nodes; N bytes; alpha_i/beta_i inside a node,
// alpha_o/beta_o between nodes; one link kind when k = 1 or m = 1):
//   ring all-reduce, one link kind        2 (p-1) alpha + 2 (p-1)/p N / beta
//   ring over nodes (k > 1)               every step waits for the slowest link it uses, and a
//                                         ring through k nodes crosses between nodes in every
//                                         step: 2 (p-1) (alpha_o + N / (p beta_o)) -- the
//                                         lock-step bound: ranks behind fast links run ahead and
//                                         hide part of the slow links' latency (measured 0.69x
//                                         of it on 2 emulated sites x 2 ranks, docs/scale-out.md)
//   hierarchical                          2 (m-1) alpha_i + 2 (m-1)/m N / beta_i      (in node)
//                                       + 2 (k-1) alpha_o + 2 (k-1)/k (N/m) / beta_o   (across)
//   mpi (Thakur, Rabenseifner & Gropp 2005, the MPICH/Open MPI choices): the faster of
//     recursive doubling      ceil(log2 p) (alpha + N / beta)                (short messages)
//     Rabenseifner            2 ceil(log2 p) alpha + 2 (p-1)/p N / beta      (long messages)
//     on the slowest link of the group (the library's algorithms ignore the topology)
//   ring reduce-scatter or all-gather     (p-1) alpha + (p-1)/p N / beta    (N: the full buffer)
// Bytes per rank: 2 (p-1)/p N for ring, hierarchical and Rabenseifner; hierarchical sends
// 2 (k-1)/k N/m of them between nodes (the ring: the ranks at node boundaries send all of their
// 2 (p-1)/p N between nodes).
//
// Invariants: seconds and bytes per second in SI units; a group of one costs 0; alpha >= 0 and
// beta > 0 are checked (Error naming the value).
#pragma once

#include <string>

namespace trillion::plan {

struct AlphaBeta {
  double latency_s = 0;         // alpha
  double bytes_per_second = 0;  // beta
  double seconds(double bytes) const { return latency_s + bytes / bytes_per_second; }
};

// p = ranks_per_node x nodes ranks, `intra` links inside a node and `inter` between nodes.
struct Topology {
  int ranks_per_node = 1, nodes = 1;
  AlphaBeta intra, inter;
  int ranks() const { return ranks_per_node * nodes; }
};

enum class AllReduceKind { kMpi, kRing, kHierarchical };
std::string all_reduce_kind_name(AllReduceKind k);
AllReduceKind parse_all_reduce_kind(const std::string& name);  // "mpi", "ring", "hierarchical"

struct CollectiveCost {
  double seconds = 0;
  double bytes_per_rank = 0;             // sent by one rank (= received)
  double inter_node_bytes_per_rank = 0;  // the part of it sent between nodes
  int steps = 0;                         // sequential message rounds (latency terms)
};

CollectiveCost all_reduce_cost(AllReduceKind kind, double bytes, const Topology& t);
// Ring reduce-scatter (N bytes in) or all-gather (N bytes out), through every node in turn.
CollectiveCost ring_reduce_scatter_cost(double bytes, const Topology& t);

}  // namespace trillion::plan
