// AlgorithmCommunicator: a Communicator decorator that runs all_reduce as an explicit algorithm
// (ring, or hierarchical node / cross-node) over point-to-point send/recv of the communicator it
// wraps, instead of the MPI library's MPI_Allreduce; in ring and hierarchical modes the
// reduce-scatter and all-gather run as explicit rings too (so that under a link emulator every
// byte of data-parallel and ZeRO traffic is a delayed message). Everything else (broadcast,
// all-to-all, send/recv, barrier) and all of mode "mpi" is forwarded to the wrapped communicator.
// The programs it runs are comm/algorithms/program.h.
//
// Non-blocking calls return a state machine: each step posts one receive and one send; test()
// advances every operation of this communicator as far as it can without blocking, wait() blocks.
// Operations complete in the order they were started: wait() on one first completes those started
// before it. Every rank starts collectives in the same order, so every rank completes them in
// the same order and no wait order can deadlock (each step's messages carry the operation's own
// tag, so operations in flight together never take each other's messages).
//
// Counting: this communicator's counters are the group's. all_reduce counts exactly the bytes
// the algorithm sends and receives on this rank (program_volume; 2 (n-1)/n N when n divides N
// elements), reduce_scatter and all_gather their ring volumes (exact, the chunks are equal), the
// rest as usual. The algorithm's messages go over private sub-communicators (split from the
// wrapped one, so user send/recv tags cannot collide with them); their own counters, and the
// wrapped communicator's, are the transport's view and must not be added to the group's
// (DeviceMesh::total_counters adds only this one). link_traffic() splits the algorithm's bytes
// into those between ranks of one node and those between nodes.
//
// Invariants: the wrapped communicator, and this one, outlive every handle they returned; buffers
// are untouched until their handle completes (as for any Communicator). Each operation holds one
// scratch buffer of its largest received part (reduce-scatter: also a copy of its input).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/algorithms/algorithm_kind.h"
#include "comm/algorithms/program.h"
#include "comm/communicator.h"

namespace trillion::comm {


// Bytes the explicit algorithms moved on this rank, between ranks on the same node and between
// nodes (the node of each member is given at construction).
struct LinkTraffic {
  uint64_t intra_node_sent = 0, intra_node_received = 0;
  uint64_t inter_node_sent = 0, inter_node_received = 0;
};

namespace algo {
class AlgorithmOp;
}

class AlgorithmCommunicator : public Communicator {
 public:
  // Collective over `inner`. `node` is the node this rank runs on (any integer; members with the
  // same value share a node). Hierarchical needs the same number of members on every node and
  // throws Error otherwise. The name is the wrapped communicator's.
  AlgorithmCommunicator(std::unique_ptr<Communicator> inner, AllReduceAlgorithm algorithm,
                        int node);
  ~AlgorithmCommunicator() override;

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  // Splits the wrapped communicator and wraps the result with the same algorithm and node.
  std::unique_ptr<Communicator> split(int color, int key, std::string name) override;

  AllReduceAlgorithm algorithm() const { return algorithm_; }
  Communicator& transport() { return *inner_; }
  const LinkTraffic& link_traffic() const { return link_traffic_; }
  // Members per node and nodes (hierarchical's m and k; ring: k is the number of distinct nodes).
  int ranks_per_node() const { return ranks_per_node_; }
  int nodes() const { return nodes_count_; }
  // The program this rank runs for an all-reduce of `count` elements.
  algo::Program all_reduce_program(int64_t count) const;

 protected:
  Traffic all_reduce_traffic(const Tensor& data) const override;
  Handle do_all_reduce(const Tensor& data, ReduceOp op) override;
  Handle do_reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) override;
  Handle do_all_gather(const Tensor& input, const Tensor& output) override;
  Handle do_broadcast(const Tensor& data, int root) override;
  Handle do_all_to_all(const Tensor& input, const std::vector<int64_t>& send_counts,
                       const Tensor& output, const std::vector<int64_t>& recv_counts) override;
  Handle do_send(const Tensor& data, int dest, int tag) override;
  Handle do_recv(const Tensor& data, int source, int tag) override;
  void do_barrier() override;

 private:
  friend class algo::AlgorithmOp;
  Communicator& level_comm(algo::Level level);
  bool crosses_nodes(algo::Level level, int peer) const;
  // Completes (or, with block=false, advances) every operation started before `op`, then `op`.
  bool progress(algo::AlgorithmOp* op, bool block);
  int next_tag();

  std::unique_ptr<Communicator> inner_;
  AllReduceAlgorithm algorithm_;
  int node_;
  std::vector<int> member_nodes_;  // node of every member, by rank
  int ranks_per_node_ = 1, nodes_count_ = 1, node_index_ = 0, index_in_node_ = 0;
  std::unique_ptr<Communicator> ring_, node_group_, cross_group_;
  std::deque<algo::AlgorithmOp*> in_flight_;
  uint64_t started_ = 0;
  LinkTraffic link_traffic_;
};

}  // namespace trillion::comm
