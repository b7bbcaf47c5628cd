// See bench_context.h. Each repetition starts after a world barrier; times are per rank and the
// report gathers them (max over ranks is what a step waits for).
#include "cli/bench_context.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli/bench_attention_buffers.h"
#include "comm/mpi_communicator.h"
#include "core/error.h"
#include "core/timer.h"
#include "parallel/context.h"

namespace trillion::cli {

int bench_ring_attention(const RingBenchOptions& o, bool json) {
  if (!comm::launch_environment().found) {
    throw Error(fmt::format(
        "bench attention --cp {} splits the sequence over {} processes; run it under a "
        "launcher: trillion launch -n {} -- bench attention --cp {} ...",
        o.cp, o.cp, o.cp, o.cp));
  }
  comm::MpiRuntime runtime;
  comm::Communicator& world = runtime.world();
  if (world.size() != o.cp) {
    throw Error(fmt::format("bench attention --cp {} needs {} processes, the job has {}", o.cp,
                            o.cp, world.size()));
  }
  const SequenceSplit split{o.cp, parse_cp_split(o.split, "--split")};
  split.spans(o.seq, 0);  // the error naming the length when it does not cut evenly
  LocalShape ls;
  ls.batch = o.batch, ls.seq = o.seq / o.cp, ls.heads = o.heads;
  ls.kv_heads = o.kv_heads > 0 ? o.kv_heads : o.heads, ls.head_dim = o.head_dim;
  if (ls.heads % ls.kv_heads != 0) throw Error("--kv-heads must divide --heads");
  const AttentionShape s = ls.attention();
  const int64_t N = s.B * s.T;
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const AttentionBenchBuffers buffers(*be, tracker, s, 1 + world.rank(), "bench:ring-attention");
  Buffer lse(tracker, MemoryCategory::activations, DType::f32, s.B * s.NH * s.T);
  parallel::RingAttention ring(*be, tracker, world, split, ls, o.seq, DType::f32,
                               {o.block, o.block});
  const Tensor q = buffers.qkv(), o_ = buffers.out(), g = buffers.dout(), dq = buffers.dqkv(),
               l = lse.view(0, {s.B, s.NH, s.T});
  // Best repetition by this rank's total time; its compute and wait split.
  double best = 1e30, best_compute = 0, best_wait = 0;
  for (int r = 0; r < o.reps; ++r) {
    world.barrier();
    const parallel::RingCounters before = ring.counters();
    Timer t;
    ring.forward(o_, l, q);
    ring.backward(dq, g, o_, q, l);
    const double seconds = t.seconds();
    if (seconds < best) {
      best = seconds;
      best_compute = ring.counters().compute_seconds - before.compute_seconds;
      best_wait = ring.counters().wait_seconds - before.wait_seconds;
    }
  }
  const int64_t pairs = ring.counters().visible_pairs / ring.counters().forward_calls;
  // The ring's communication alone: forward's (cp-1) K/V hops, backward's (cp-1) K/V + cp dK/dV.
  Buffer a(tracker, MemoryCategory::workspace, DType::f32, N * 2 * s.KV * s.HD);
  Buffer b(tracker, MemoryCategory::workspace, DType::f32, N * 2 * s.KV * s.HD);
  parallel::CpRing cp_ring(world);
  double comm_alone = 1e30;
  for (int r = 0; r < o.reps; ++r) {
    world.barrier();
    Timer t;
    for (int hop = 0; hop < 3 * o.cp - 2; ++hop) {
      cp_ring.start(hop % 2 ? a.flat() : b.flat(), hop % 2 ? b.flat() : a.flat(),
                    parallel::RingStream::kv);
      cp_ring.wait();
    }
    comm_alone = std::min(comm_alone, t.seconds());
  }
  std::vector<double> all(5 * o.cp, 0.0);
  const int me = world.rank();
  all[5 * me] = best, all[5 * me + 1] = best_compute, all[5 * me + 2] = best_wait;
  all[5 * me + 3] = comm_alone, all[5 * me + 4] = static_cast<double>(pairs);
  world.all_reduce(Tensor(all.data(), DType::f64, {5 * o.cp}));
  if (me != 0) return 0;
  double total_pairs = 0, max_pairs = 0;
  for (int r = 0; r < o.cp; ++r) {
    total_pairs += all[5 * r + 4];
    max_pairs = std::max(max_pairs, all[5 * r + 4]);
  }
  const double balance = max_pairs / (total_pairs / o.cp);
  nlohmann::json ranks = nlohmann::json::array();
  for (int r = 0; r < o.cp; ++r) {
    const double hidden = std::clamp(1.0 - all[5 * r + 2] / all[5 * r + 3], 0.0, 1.0);
    ranks.push_back({{"rank", r},
                     {"seconds_fwd_bwd", all[5 * r]},
                     {"compute_s", all[5 * r + 1]},
                     {"ring_wait_s", all[5 * r + 2]},
                     {"ring_alone_s", all[5 * r + 3]},
                     {"hidden_fraction", hidden},
                     {"visible_pairs", all[5 * r + 4]}});
  }
  if (json) {
    std::printf("%s\n", nlohmann::json{{"cp", o.cp},
                                       {"split", o.split},
                                       {"seq", o.seq},
                                       {"batch", o.batch},
                                       {"heads", s.NH},
                                       {"kv_heads", s.KV},
                                       {"head_dim", s.HD},
                                       {"block_bytes", ring.block_bytes()},
                                       {"pairs_max_over_mean", balance},
                                       {"ranks", ranks}}
                            .dump()
                            .c_str());
    return 0;
  }
  std::printf(
      "ring attention, cp %d %s, B %lld T %lld (T/cp %lld) heads %lld/%lld dim %lld; K/V block "
      "%.2f MiB; causal pairs max/mean %.3f\n",
      o.cp, o.split.c_str(), static_cast<long long>(o.batch), static_cast<long long>(o.seq),
      static_cast<long long>(s.T), static_cast<long long>(s.NH), static_cast<long long>(s.KV),
      static_cast<long long>(s.HD), ring.block_bytes() / 1048576.0, balance);
  std::printf("  rank  fwd+bwd s  compute s  ring wait s  ring alone s  hidden\n");
  for (const auto& r : ranks) {
    std::printf("  %4d  %9.4f  %9.4f  %11.4f  %12.4f  %5.1f%%\n", r["rank"].get<int>(),
                r["seconds_fwd_bwd"].get<double>(), r["compute_s"].get<double>(),
                r["ring_wait_s"].get<double>(), r["ring_alone_s"].get<double>(),
                100 * r["hidden_fraction"].get<double>());
  }
  return 0;
}

}  // namespace trillion::cli
