// Context parallelism's communication: the cp ring that ring attention passes K/V blocks (and,
// in backward, their dK/dV accumulators) around. Rank r sends to r+1 and receives from r-1
// (mod cp) with non-blocking send/recv, so the block in flight travels while the current one is
// computed. The cp group's Communicator counts every byte (send/recv kinds); the volumes per
// layer and micro-batch are plan/context_ring.h's (forward (cp - 1) K/V blocks, backward
// (cp - 1) K/V + cp dK/dV blocks), which RingAttention checks its counters against on every call
// and plan/step_model times.
// Invariant: start() may be called again only after wait(); tags keep the K/V and dK/dV streams
// apart, so both may be in flight at once.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"

namespace trillion::parallel {

enum class RingStream : int { kv = 101, dkv = 102 };

class CpRing {
 public:
  explicit CpRing(comm::Communicator& cp) : cp_(cp) {}
  int size() const { return cp_.size(); }
  int rank() const { return cp_.rank(); }
  int next() const { return (cp_.rank() + 1) % cp_.size(); }
  int prev() const { return (cp_.rank() + cp_.size() - 1) % cp_.size(); }
  // The rank whose block this rank holds after `hops` passes.
  int source_after(int hops) const { return ((cp_.rank() - hops) % size() + size()) % size(); }

  // Starts sending `send` to next() and receiving `recv` from prev() (same size).
  void start(const Tensor& send, const Tensor& recv, RingStream stream);
  // Lets the transport move data of what is in flight without blocking (MPI progresses
  // non-blocking transfers only inside MPI calls): called between block kernels.
  void progress();
  // Waits for everything started since the last wait; returns the seconds spent blocked.
  double wait();
  // Bytes this rank has sent over the cp group (its Communicator's send counter).
  uint64_t bytes_sent() const { return cp_.counters().sent(comm::Collective::send); }

 private:
  comm::Communicator& cp_;
  std::vector<comm::Handle> in_flight_;
};

}  // namespace trillion::parallel
