// Google Benchmark of the CPU backend's kernels at the shapes of configs/bench-d512.toml
// (N = 2048 tokens, C = 512, F = 1536, V = 8192, T = 256, 8 heads of 64). Reports GFLOP/s or
// bytes/s so kernels can be compared with `trillion bench gemm`'s peak.
#include <benchmark/benchmark.h>

#include "backend/backend.h"

using namespace trillion;

namespace {

struct Fixture {
  MemoryTracker tracker;
  std::unique_ptr<Backend> be = make_cpu_backend(tracker);
  Buffer take(int64_t n) {
    Buffer b(tracker, MemoryCategory::workspace, DType::f32, n);
    be->fill(b.flat(), 0.01);
    return b;
  }
};

// Args: M, N, K, transpose A, transpose B (the model uses NT forward, NN dgrad, TN wgrad).
void BM_Gemm(benchmark::State& state) {
  Fixture f;
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  const bool ta = state.range(3) != 0, tb = state.range(4) != 0;
  Buffer a = f.take(M * K), b = f.take(N * K), c = f.take(M * N);
  const Tensor A = ta ? a.view(0, {K, M}) : a.view(0, {M, K});
  const Tensor B = tb ? b.view(0, {N, K}) : b.view(0, {K, N});
  for (auto _ : state) f.be->gemm(c.view(0, {M, N}), ta, tb, A, B, 1.0, ta ? 1.0 : 0.0);
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * M * N * K, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Gemm)
    ->Args({2048, 1536, 512, 0, 1})  // QKV forward
    ->Args({2048, 3072, 512, 0, 1})  // gate/up forward
    ->Args({2048, 512, 1536, 0, 1})  // down forward
    ->Args({2048, 512, 3072, 0, 0})  // gate/up dgrad
    ->Args({3072, 512, 2048, 1, 0})  // gate/up wgrad
    ->Args({512, 1536, 2048, 1, 0})  // down wgrad
    ->Args({256, 8192, 512, 0, 1})   // LM head block forward
    ->Args({8192, 512, 256, 1, 0})   // LM head block wgrad
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_Attention(benchmark::State& state) {
  Fixture f;
  AttentionShape s{8, state.range(0), 8, 8, 64};
  const int64_t N = s.B * s.T;
  Buffer qkv = f.take(N * s.qkv_width()), out = f.take(N * s.NH * s.HD);
  Buffer probs = f.take(s.B * s.NH * s.T * s.T), dqkv = f.take(N * s.qkv_width());
  for (auto _ : state) {
    f.be->attention_forward(out.view(0, {N, s.NH * s.HD}), probs.view(0, {s.B, s.NH, s.T, s.T}),
                            qkv.view(0, {N, s.qkv_width()}), s);
    f.be->attention_backward(dqkv.view(0, {N, s.qkv_width()}), out.view(0, {N, s.NH * s.HD}),
                             qkv.view(0, {N, s.qkv_width()}), probs.view(0, {s.B, s.NH, s.T, s.T}),
                             s);
  }
  // Forward 2 GEMMs + backward 4 of B*NH*T*T*HD each (full square, as computed).
  state.counters["GFLOP/s"] = benchmark::Counter(12.0 * s.B * s.NH * s.T * s.T * s.HD,
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Attention)->Arg(256)->Unit(benchmark::kMillisecond)->UseRealTime();

// The tiled (FlashAttention-2) kernels; args: 0 forward or 1 backward, then the shape: 256 is
// bench-d512's (8 sequences of 256, 8 heads of 64), 1024 bench-gpt2-small's (2 sequences of
// 1024, 12 heads of 64). FLOPs in the causal count of the tiles computed (the backend's
// attention_tile_flops), not the square.
void BM_FlashAttention(benchmark::State& state) {
  Fixture f;
  const int64_t T = state.range(1);
  AttentionShape s = T == 256 ? AttentionShape{8, 256, 8, 8, 64} : AttentionShape{2, T, 12, 12, 64};
  const int64_t N = s.B * s.T;
  const bool backward = state.range(0) != 0;
  Buffer qkv = f.take(N * s.qkv_width()), out = f.take(N * s.out_width());
  Buffer lse = f.take(s.B * s.NH * s.T), dqkv = f.take(N * s.qkv_width());
  const Tensor tq = qkv.view(0, {N, s.qkv_width()}), to = out.view(0, {N, s.out_width()});
  const Tensor tl = lse.view(0, {s.B, s.NH, s.T});
  f.be->flash_attention_forward(to, tl, tq, s, {});
  // One forward's FLOPs over the tiles it computed (the forward counts them); the backward runs
  // the same tiles with twice the products.
  const double forward_flops = f.be->attention_tile_flops().computed_flops;
  for (auto _ : state) {
    if (backward) {
      f.be->flash_attention_backward(dqkv.view(0, {N, s.qkv_width()}), to, to, tq, tl, s, {});
    } else {
      f.be->flash_attention_forward(to, tl, tq, s, {});
    }
  }
  state.counters["GFLOP/s"] = benchmark::Counter((backward ? 2.0 : 1.0) * forward_flops,
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}
BENCHMARK(BM_FlashAttention)
    ->Args({0, 256})
    ->Args({1, 256})
    ->Args({0, 1024})
    ->Args({1, 1024})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_RmsNorm(benchmark::State& state) {
  Fixture f;
  const int64_t N = 2048, C = 512;
  Buffer x = f.take(N * C), out = f.take(N * C), w = f.take(C), rstd = f.take(N);
  for (auto _ : state) {
    f.be->rmsnorm_forward(out.view(0, {N, C}), rstd.view(0, {N}), x.view(0, {N, C}), w.view(0, {C}),
                          1e-5);
  }
  state.SetBytesProcessed(state.iterations() * 2 * N * C * 4);
}
BENCHMARK(BM_RmsNorm)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Swiglu(benchmark::State& state) {
  Fixture f;
  const int64_t N = 2048, F = 1536;
  Buffer gu = f.take(N * 2 * F), out = f.take(N * F), d = f.take(N * 2 * F);
  for (auto _ : state) {
    f.be->swiglu_forward(out.view(0, {N, F}), gu.view(0, {N, 2 * F}));
    f.be->swiglu_backward(d.view(0, {N, 2 * F}), out.view(0, {N, F}), gu.view(0, {N, 2 * F}));
  }
  state.SetItemsProcessed(state.iterations() * N * F);
}
BENCHMARK(BM_Swiglu)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_CrossEntropy(benchmark::State& state) {
  Fixture f;
  const int64_t N = 256, V = 8192;
  Buffer logits = f.take(N * V), losses = f.take(N), lse = f.take(N);
  std::vector<int32_t> targets(N, 3);
  for (auto _ : state) {
    f.be->cross_entropy_forward(losses.view(0, {N}), lse.view(0, {N}), logits.view(0, {N, V}),
                                targets.data());
  }
  state.SetItemsProcessed(state.iterations() * N * V);
}
BENCHMARK(BM_CrossEntropy)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
