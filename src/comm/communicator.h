// Communicator: the collectives one process group needs (all-reduce, reduce-scatter, all-gather,
// broadcast, all-to-all with per-rank counts, send/recv, barrier), blocking and non-blocking, over
// Tensor views. Implementations: MpiCommunicator (comm/mpi_communicator.h) and LocalCommunicator
// (one process, no MPI: every collective is the identity, so single-process code runs the same
// calls).
//
// Every call goes through CommCounters before it reaches the transport, so the bytes this rank
// sends and receives per collective kind are exact and per group (one Communicator = one group).
// Counted volumes are the bandwidth-optimal ring algorithms' (Patarasuk & Yuan 2009; NCCL's
// "bus bandwidth" convention), the volumes the cost model in plan/ uses, not whatever algorithm
// the MPI library picked at run time:
//   all_reduce of N bytes        sent = received = 2 (n-1) N / n   (reduce-scatter + all-gather;
//                                a communicator that runs its own algorithm, comm/algorithms/,
//                                counts the bytes that algorithm moves instead)
//   reduce_scatter, N bytes in   sent = received = (n-1) N / n     (N / n kept per rank)
//   all_gather, N bytes out      sent = received = (n-1) N / n
//   broadcast of N bytes         root sends N, every other rank receives N
//   all_to_all                   sent = bytes to other ranks, received = bytes from other ranks
//   send / recv                  the message bytes
// Non-blocking calls are counted when they start. Invariants: buffers of a pending operation must
// stay alive and untouched until its handle completes; a Handle that is destroyed unfinished
// waits for the operation (so a forgotten handle cannot leave MPI writing into freed memory).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace trillion::comm {

enum class Collective : uint8_t {
  all_reduce,
  reduce_scatter,
  all_gather,
  broadcast,
  all_to_all,
  send,
  recv,
  barrier
};
inline constexpr int kCollectiveKinds = 8;
std::string_view collective_name(Collective c);

enum class ReduceOp : uint8_t { sum, max };

// Bytes and calls per collective kind, for one group.
struct CommCounters {
  std::array<uint64_t, kCollectiveKinds> bytes_sent{};
  std::array<uint64_t, kCollectiveKinds> bytes_received{};
  std::array<uint64_t, kCollectiveKinds> calls{};
  // Wall seconds spent inside the blocking all_reduce, reduce_scatter, all_gather and broadcast:
  // transfer plus waiting for the slowest peer (tensor parallelism's collectives are all of this
  // kind). Non-blocking operations overlap compute and are not timed here.
  double blocking_seconds = 0;

  uint64_t sent(Collective c) const { return bytes_sent[static_cast<int>(c)]; }
  uint64_t received(Collective c) const { return bytes_received[static_cast<int>(c)]; }
  uint64_t count(Collective c) const { return calls[static_cast<int>(c)]; }
  uint64_t total_sent() const;
  uint64_t total_received() const;
  void add(Collective c, uint64_t sent, uint64_t received);
  CommCounters& operator+=(const CommCounters& other);
};
// Counters accumulated since `earlier` (a copy taken before).
CommCounters operator-(const CommCounters& now, const CommCounters& earlier);

// An operation in flight. wait() blocks until it completes (and throws Error if it failed);
// test() makes progress and reports completion without blocking.
class PendingOp {
 public:
  virtual ~PendingOp() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;
};
using Handle = std::unique_ptr<PendingOp>;

// Waits for every handle in `handles` and clears it.
void wait_all(std::vector<Handle>& handles);

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The group's name in reports and error messages ("world", "dp", "tp", ...).
  const std::string& name() const { return name_; }
  const CommCounters& counters() const { return counters_; }

  // Blocking collectives. Tensors must be contiguous; every rank passes the same dtype and sizes.
  // all_reduce: in place. reduce_scatter: input holds size() equal chunks, output one chunk
  // (rank r gets the reduction of chunk r). all_gather: output holds size() chunks, chunk r from
  // rank r. broadcast: in place from `root`.
  void all_reduce(const Tensor& data, ReduceOp op = ReduceOp::sum);
  void reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op = ReduceOp::sum);
  void all_gather(const Tensor& input, const Tensor& output);
  void broadcast(const Tensor& data, int root);
  // Rank r sends send_counts[p] elements (in rank order, packed) to rank p and receives
  // recv_counts[p] elements from rank p into `output` (packed in rank order).
  void all_to_all(const Tensor& input, const std::vector<int64_t>& send_counts,
                  const Tensor& output, const std::vector<int64_t>& recv_counts);
  void send(const Tensor& data, int dest, int tag = 0);
  void recv(const Tensor& data, int source, int tag = 0);
  void barrier();

  // Non-blocking variants: same contracts, complete when the handle does.
  Handle start_all_reduce(const Tensor& data, ReduceOp op = ReduceOp::sum);
  Handle start_reduce_scatter(const Tensor& input, const Tensor& output,
                              ReduceOp op = ReduceOp::sum);
  Handle start_all_gather(const Tensor& input, const Tensor& output);
  Handle start_broadcast(const Tensor& data, int root);
  Handle start_all_to_all(const Tensor& input, const std::vector<int64_t>& send_counts,
                          const Tensor& output, const std::vector<int64_t>& recv_counts);
  Handle start_send(const Tensor& data, int dest, int tag = 0);
  Handle start_recv(const Tensor& data, int source, int tag = 0);

  // A new communicator of the ranks with the same `color`, ordered by `key` (MPI_Comm_split).
  // Collective over this communicator.
  virtual std::unique_ptr<Communicator> split(int color, int key, std::string name) = 0;

 protected:
  explicit Communicator(std::string name) : name_(std::move(name)) {}

  // Bytes this rank's all_reduce of `data` sends and receives, as counted: the ring volume
  // 2 (n-1) N / n above, unless an implementation runs a known algorithm of its own and counts
  // what that algorithm moves (AlgorithmCommunicator). Called after the argument checks.
  struct Traffic {
    uint64_t sent = 0, received = 0;
  };
  virtual Traffic all_reduce_traffic(const Tensor& data) const;

  // The transport, called after argument checks and counting. Implementations may assume
  // contiguous tensors, matching sizes and valid ranks.
  virtual Handle do_all_reduce(const Tensor& data, ReduceOp op) = 0;
  virtual Handle do_reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) = 0;
  virtual Handle do_all_gather(const Tensor& input, const Tensor& output) = 0;
  virtual Handle do_broadcast(const Tensor& data, int root) = 0;
  virtual Handle do_all_to_all(const Tensor& input, const std::vector<int64_t>& send_counts,
                               const Tensor& output, const std::vector<int64_t>& recv_counts) = 0;
  virtual Handle do_send(const Tensor& data, int dest, int tag) = 0;
  virtual Handle do_recv(const Tensor& data, int source, int tag) = 0;
  virtual void do_barrier() = 0;

 private:
  void check_peer(int peer, const char* what) const;
  std::string name_;
  CommCounters counters_;
};

// One process, no MPI: size 1, rank 0. Collectives copy input to output (the identity of a
// one-member group); send/recv to self are errors. Counted bytes are all zero, as they are for
// any group of one.
class LocalCommunicator : public Communicator {
 public:
  explicit LocalCommunicator(std::string name = "world") : Communicator(std::move(name)) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::unique_ptr<Communicator> split(int color, int key, std::string name) override;

 protected:
  Handle do_all_reduce(const Tensor& data, ReduceOp op) override;
  Handle do_reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) override;
  Handle do_all_gather(const Tensor& input, const Tensor& output) override;
  Handle do_broadcast(const Tensor& data, int root) override;
  Handle do_all_to_all(const Tensor& input, const std::vector<int64_t>& send_counts,
                       const Tensor& output, const std::vector<int64_t>& recv_counts) override;
  Handle do_send(const Tensor& data, int dest, int tag) override;
  Handle do_recv(const Tensor& data, int source, int tag) override;
  void do_barrier() override {}
};

}  // namespace trillion::comm
