// See program.h.
#include "comm/algorithms/program.h"

#include "core/error.h"

namespace trillion::comm::algo {

namespace {

int mod(int a, int n) {
  return ((a % n) + n) % n;
}

// One ring step: rank r sends part send_part to r+1 and receives part recv_part from r-1.
void append_step(Program& out, Span region, int n, int r, int send_part, int recv_part, bool reduce,
                 Level level) {
  Transfer t;
  t.level = level;
  t.reduce = reduce;
  t.send = ring_part(region, n, send_part);
  t.recv = ring_part(region, n, recv_part);
  if (t.send.count > 0) t.send_peer = mod(r + 1, n);
  if (t.recv.count > 0) t.recv_peer = mod(r - 1, n);
  if (t.send_peer >= 0 || t.recv_peer >= 0) out.push_back(t);
}

}  // namespace

Span ring_part(Span region, int n, int p) {
  TRILLION_CHECK(n >= 1 && p >= 0 && p < n, "ring part out of range");
  const int64_t begin = region.count * p / n;
  const int64_t end = region.count * (p + 1) / n;
  return {region.begin + begin, end - begin};
}

void append_ring_reduce_scatter(Program& out, Span region, int n, int r, Level level) {
  for (int s = 0; s + 1 < n; ++s) {
    append_step(out, region, n, r, mod(r - s - 1, n), mod(r - s - 2, n), true, level);
  }
}

void append_ring_all_gather(Program& out, Span region, int n, int r, Level level) {
  for (int s = 0; s + 1 < n; ++s) {
    append_step(out, region, n, r, mod(r - s, n), mod(r - s - 1, n), false, level);
  }
}

Program ring_all_reduce(int64_t count, int n, int r) {
  Program p;
  append_ring_reduce_scatter(p, {0, count}, n, r, Level::ring);
  append_ring_all_gather(p, {0, count}, n, r, Level::ring);
  return p;
}

Program hierarchical_all_reduce(int64_t count, int m, int j, int k, int i) {
  const Span all{0, count};
  const Span mine = ring_part(all, m, j);
  Program p;
  append_ring_reduce_scatter(p, all, m, j, Level::node);
  append_ring_reduce_scatter(p, mine, k, i, Level::cross);
  append_ring_all_gather(p, mine, k, i, Level::cross);
  append_ring_all_gather(p, all, m, j, Level::node);
  return p;
}

ProgramVolume program_volume(const Program& p) {
  ProgramVolume v;
  for (const Transfer& t : p) {
    const int level = static_cast<int>(t.level);
    if (t.send_peer >= 0) {
      v.sent += t.send.count;
      v.sent_on[level] += t.send.count;
    }
    if (t.recv_peer >= 0) {
      v.received += t.recv.count;
      v.received_on[level] += t.recv.count;
    }
  }
  return v;
}

}  // namespace trillion::comm::algo
