// `trillion bench attention --cp N`: causal ring attention (parallel/context.h) over N processes
// (run under `trillion launch -n N -- bench attention --cp N ...`), forward + backward of a
// [batch, seq] sequence split zigzag or contiguous. Reports per rank: the best fwd+bwd time, the
// time in the block kernels, the time blocked on the ring, the ring's communication alone (the
// same passes with no compute) and so the fraction of communication hidden behind compute
// (1 - blocked / communication alone), and the causal (query, key) pairs each rank attended
// (max/mean: 1 under zigzag).
#pragma once

#include <cstdint>
#include <string>

namespace trillion::cli {

struct RingBenchOptions {
  int cp = 2;
  int64_t seq = 8192, batch = 1, heads = 8, kv_heads = 0, head_dim = 64, block = 0;
  std::string split = "zigzag";
  int reps = 3;
};

int bench_ring_attention(const RingBenchOptions& options, bool json);

}  // namespace trillion::cli
