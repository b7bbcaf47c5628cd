// Collective algorithms as data: the list of point-to-point transfers one rank performs, step by
// step, for a ring reduce-scatter / all-gather / all-reduce and for the hierarchical all-reduce.
// AlgorithmCommunicator (algorithm_communicator.h) executes such a list over send/recv; tests
// execute the lists of all ranks in memory to check them without MPI; the byte counts of a list
// are what the counters report. No communication here.
//
// Ring (Patarasuk & Yuan 2009): a region of `count` elements is cut into n parts, part p =
// [p*count/n, (p+1)*count/n) (sizes differ by at most one element). Rank r of a ring of n sends to
// r+1 and receives from r-1 (mod n).
//   reduce-scatter, steps s = 0..n-2: send part (r-s-1), receive part (r-s-2) and add it in;
//     afterwards rank r holds the full reduction of part r (the reduce_scatter contract).
//   all-gather, steps s = 0..n-2: send part (r-s), receive part (r-s-1) into place.
// Per rank the all-reduce sends every part but its own in the reduce-scatter and every part but
// part r+1 in the all-gather: 2 count - |part r| - |part r+1| elements, which is exactly
// 2 (n-1)/n count when n divides count. Every part is summed in one fixed order (around the
// ring), so results are bitwise reproducible and identical on all ranks.
//
// Hierarchical (two levels: n = m ranks per node x k nodes; rank j of its node, node i):
//   1. ring reduce-scatter of the whole buffer inside the node (m parts): rank j owns part j;
//   2. ring all-reduce of node part j across the k nodes (the members with the same j);
//   3. ring all-gather of the whole buffer inside the node.
// Bytes per rank: 2 (m-1)/m N inside the node + 2 (k-1)/k N/m across nodes = 2 (n-1)/n N in all,
// the ring's total, but only N/m of it per rank crosses the slow level (and with 2 (k-1) instead
// of 2 (n-1) latencies).
//
// Invariants: a Transfer's send and receive spans are disjoint parts of the region; transfers of
// zero elements are left out on both sides (both sides compute the same part sizes).
#pragma once

#include <cstdint>
#include <vector>

namespace trillion::comm::algo {

// A range of elements [begin, begin + count).
struct Span {
  int64_t begin = 0, count = 0;
  bool operator==(const Span&) const = default;
};

// Part p of n of the region `region` (floor split).
Span ring_part(Span region, int n, int p);

// Which communicator a transfer runs on: the group's own ring, or for the hierarchical
// algorithm its node (intra) and cross-node (inter) sub-groups.
enum class Level : uint8_t { ring, node, cross };

// One step of a rank's program: send `send` to `send_peer` and receive `recv` from `recv_peer`
// (ranks in the level's communicator); reduce=true adds the received elements into place,
// false copies them into place. Either half may be absent (peer -1) when its part is empty.
struct Transfer {
  Level level = Level::ring;
  int send_peer = -1, recv_peer = -1;
  Span send, recv;
  bool reduce = false;
};

using Program = std::vector<Transfer>;

// Appends to `out` the ring reduce-scatter / all-gather of `region` for rank r of n on `level`.
void append_ring_reduce_scatter(Program& out, Span region, int n, int r, Level level);
void append_ring_all_gather(Program& out, Span region, int n, int r, Level level);

// The whole program of rank r (of n) for an all-reduce of `count` elements around the ring.
Program ring_all_reduce(int64_t count, int n, int r);

// The program of the rank that is member j of its node (m members per node) on node i (k nodes).
Program hierarchical_all_reduce(int64_t count, int m, int j, int k, int i);

// Elements a program sends and receives, in total and on each level.
struct ProgramVolume {
  int64_t sent = 0, received = 0;
  int64_t sent_on[3] = {0, 0, 0}, received_on[3] = {0, 0, 0};  // indexed by Level
};
ProgramVolume program_volume(const Program& p);

}  // namespace trillion::comm::algo
