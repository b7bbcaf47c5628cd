// `trillion bench attention --cp N`: causal ring attention (parallel/context.h) over N processes
// (run under `trillion launch -n N -- bench attention --cp N ...`), forward + backward of a
// [batch, seq] sequence split zigzag or contiguous. Each repetition times, on the slowest rank,
// the ring overlapped (as training runs it: a hop travels while a block is computed), the same
// ring serialized (every hop waited for right after it starts) and the ring's hops alone (no
// compute). Reports the fraction of the ring's transfer time that overlapping hides,
// (serialized - overlapped) / alone, unclamped; per rank the block kernels' and the ring waits'
// time of the overlapped run; and the causal (query, key) pairs each rank attended per pass
// (max/mean: 1 under zigzag).
#pragma once

#include <cstdint>
#include <string>

namespace trillion::cli {

struct RingBenchOptions {
  int cp = 2;
  int64_t seq = 8192, batch = 1, heads = 8, kv_heads = 0, head_dim = 64, block = 0;
  int64_t v_head_dim = 0;  // 0: head_dim
  std::string split = "zigzag";
  int reps = 3;
};

int bench_ring_attention(const RingBenchOptions& options, bool json);

}  // namespace trillion::cli
