// CPU backend ops: GEMM in every transpose case against naive loops (f32 and f64, batched,
// accumulate), and every layer op's backward against central finite differences in f64
// (relative error < 1e-6). Scalar test loss: sum(R * out) for a fixed random R. The
// vocabulary-parallel ops against the whole-vocabulary ones on two shards.
#include "backend/backend.h"

#include <gtest/gtest.h>

#include "test_util.h"

using namespace trillion;
using namespace trillion::testing;

namespace {

class BackendTest : public ::testing::Test {
 protected:
  MemoryTracker tracker;
  std::unique_ptr<Backend> be = make_cpu_backend(tracker);
};

template <typename T>
void naive_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                const std::vector<T>& A, const std::vector<T>& B, double beta, std::vector<T>& C) {
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double a = ta ? A[k * M + i] : A[i * K + k];
        const double b = tb ? B[j * K + k] : B[k * N + j];
        s += a * b;
      }
      C[i * N + j] = static_cast<T>(alpha * s + beta * C[i * N + j]);
    }
  }
}

template <typename T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

template <typename T>
void check_gemm(Backend& be, double tol) {
  const int64_t M = 13, N = 7, K = 11;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      auto A = cast<T>(random_vector(M * K, 1));
      auto B = cast<T>(random_vector(K * N, 2));
      auto C = cast<T>(random_vector(M * N, 3));
      auto ref = C;
      naive_gemm(ta, tb, M, N, K, 0.5, A, B, 1.0, ref);
      Tensor tA(A.data(), dtype_of<T>(), {ta ? K : M, ta ? M : K});
      Tensor tB(B.data(), dtype_of<T>(), {tb ? N : K, tb ? K : N});
      be.gemm(Tensor(C.data(), dtype_of<T>(), {M, N}), ta, tb, tA, tB, 0.5, 1.0);
      for (int64_t i = 0; i < M * N; ++i) EXPECT_NEAR(C[i], ref[i], tol) << ta << tb << i;
    }
  }
}

}  // namespace

TEST_F(BackendTest, GemmAllTransposesF32) {
  check_gemm<float>(*be, 1e-5);
}
TEST_F(BackendTest, GemmAllTransposesF64) {
  check_gemm<double>(*be, 1e-12);
}

TEST_F(BackendTest, GemmBatchedMatchesPerBatchGemm) {
  const int64_t batch = 5, M = 6, N = 4, K = 3;
  auto A = random_vector(batch * M * K, 4), B = random_vector(batch * N * K, 5);
  std::vector<double> C(batch * M * N, 0.0);
  be->gemm_batched(host(C, {batch, M, N}), false, true, host(A, {batch, M, K}),
                   host(B, {batch, N, K}), 1.0, 0.0);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<double> a(A.begin() + b * M * K, A.begin() + (b + 1) * M * K);
    std::vector<double> bb(B.begin() + b * N * K, B.begin() + (b + 1) * N * K);
    std::vector<double> ref(M * N, 0.0);
    naive_gemm(false, true, M, N, K, 1.0, a, bb, 0.0, ref);
    for (int64_t i = 0; i < M * N; ++i) EXPECT_NEAR(C[b * M * N + i], ref[i], 1e-12);
  }
}

TEST_F(BackendTest, RmsNormGradients) {
  const int64_t N = 5, C = 8;
  auto x = random_vector(N * C, 10), w = random_vector(C, 11), R = random_vector(N * C, 12);
  std::vector<double> out(N * C), rstd(N);
  auto loss = [&] {
    be->rmsnorm_forward(host(out, {N, C}), host(rstd, {N}), host(x, {N, C}), host(w, {C}), 1e-5);
    return dot(out, R);
  };
  loss();
  std::vector<double> dx(N * C, 0.0), dw(C, 0.0);
  be->rmsnorm_backward_input(host(dx, {N, C}), host(R, {N, C}), host(x, {N, C}), host(w, {C}),
                             host(rstd, {N}));
  be->rmsnorm_backward_weight(host(dw, {C}), host(R, {N, C}), host(x, {N, C}), host(rstd, {N}));
  EXPECT_LT(gradient_error(loss, x.data(), N * C, dx.data()), 1e-6);
  EXPECT_LT(gradient_error(loss, w.data(), C, dw.data()), 1e-6);
}

TEST_F(BackendTest, RopeBackwardIsTheTransposeAndPreservesNorm) {
  AttentionShape s{2, 5, 4, 2, 6};
  const int64_t N = s.B * s.T, W = s.qkv_width();
  std::vector<double> cs(s.T * s.HD);
  for (int64_t t = 0; t < s.T; ++t) {
    for (int64_t i = 0; i < s.HD / 2; ++i) {
      const double a = t * std::pow(10000.0, -2.0 * i / s.HD);
      cs[t * s.HD + i] = std::cos(a);
      cs[t * s.HD + s.HD / 2 + i] = std::sin(a);
    }
  }
  auto x0 = random_vector(N * W, 20), R = random_vector(N * W, 21);
  std::vector<double> x;
  auto loss = [&] {
    x = x0;
    be->rope_forward(host(x, {N, W}), host(cs, {s.T, s.HD}), s);
    return dot(x, R);
  };
  loss();
  EXPECT_NEAR(dot(x, x), dot(x0, x0), 1e-9);  // rotations preserve the norm
  std::vector<double> dx = R;
  be->rope_backward(host(dx, {N, W}), host(cs, {s.T, s.HD}), s);
  EXPECT_LT(gradient_error(loss, x0.data(), N * W, dx.data(), 200), 1e-6);
}

TEST_F(BackendTest, AttentionGradientsWithGroupedHeads) {
  for (AttentionShape s : {AttentionShape{2, 7, 4, 2, 4}, AttentionShape{1, 5, 3, 3, 2},
                           AttentionShape{2, 6, 4, 1, 4}}) {
    const int64_t N = s.B * s.T, W = s.qkv_width(), O = s.NH * s.HD;
    auto qkv = random_vector(N * W, 30), R = random_vector(N * O, 31);
    std::vector<double> out(N * O), probs(s.B * s.NH * s.T * s.T);
    auto loss = [&] {
      be->attention_forward(host(out, {N, O}), host(probs, {s.B, s.NH, s.T, s.T}),
                            host(qkv, {N, W}), s);
      return dot(out, R);
    };
    loss();
    // Causality: probabilities above the diagonal are exactly zero, rows sum to one.
    for (int64_t i = 0; i < s.T; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < s.T; ++j) {
        if (j > i) {
          EXPECT_EQ(probs[i * s.T + j], 0.0);
        }
        sum += probs[i * s.T + j];
      }
      EXPECT_NEAR(sum, 1.0, 1e-12);
    }
    std::vector<double> dqkv(N * W, 7.0);  // garbage: backward must overwrite, not accumulate
    be->attention_backward(host(dqkv, {N, W}), host(R, {N, O}), host(qkv, {N, W}),
                           host(probs, {s.B, s.NH, s.T, s.T}), s);
    EXPECT_LT(gradient_error(loss, qkv.data(), N * W, dqkv.data(), 300), 1e-6);
  }
}

// MLA's attention core: value head dim VD != query/key head dim HD (VD < HD and VD > HD, MHA and
// GQA). Every column of Q | K | V is checked, materialised and tiled (tiles of 4 that do not
// divide T), the softmax scale being 1/sqrt(HD).
TEST_F(BackendTest, AttentionGradientsWithValueHeadDim) {
  for (const AttentionShape& s :
       {AttentionShape{2, 6, 4, 2, 12, 8}, AttentionShape{1, 7, 4, 4, 8, 12},
        AttentionShape{1, 5, 4, 2, 8, 12}}) {
    const int64_t N = s.B * s.T, W = s.qkv_width(), O = s.out_width();
    ASSERT_EQ(W, (s.NH + s.KV) * s.HD + s.KV * s.VD);
    auto qkv = random_vector(N * W, 32), R = random_vector(N * O, 33);
    std::vector<double> out(N * O), probs(s.B * s.NH * s.T * s.T), lse(s.B * s.NH * s.T);
    for (const bool tiled : {false, true}) {
      auto loss = [&] {
        if (tiled) {
          be->flash_attention_forward(host(out, {N, O}), host(lse, {s.B, s.NH, s.T}),
                                      host(qkv, {N, W}), s, {4, 4});
        } else {
          be->attention_forward(host(out, {N, O}), host(probs, {s.B, s.NH, s.T, s.T}),
                                host(qkv, {N, W}), s);
        }
        return dot(out, R);
      };
      loss();
      std::vector<double> dqkv(N * W, 7.0);  // garbage: backward must overwrite
      if (tiled) {
        be->flash_attention_backward(host(dqkv, {N, W}), host(R, {N, O}), host(out, {N, O}),
                                     host(qkv, {N, W}), host(lse, {s.B, s.NH, s.T}), s, {4, 4});
      } else {
        be->attention_backward(host(dqkv, {N, W}), host(R, {N, O}), host(qkv, {N, W}),
                               host(probs, {s.B, s.NH, s.T, s.T}), s);
      }
      // Every 7th element: 7 is prime to the row widths, so every column of Q | K | V is hit.
      EXPECT_LT(gradient_error(loss, qkv.data(), N * W, dqkv.data(), N * W / 7), 1e-6)
          << (tiled ? "tiled" : "materialised") << " HD " << s.HD << " VD " << s.VD;
    }
  }
}

TEST_F(BackendTest, SwigluGradients) {
  const int64_t N = 4, F = 6;
  auto gu = random_vector(N * 2 * F, 40), R = random_vector(N * F, 41);
  std::vector<double> out(N * F);
  auto loss = [&] {
    be->swiglu_forward(host(out, {N, F}), host(gu, {N, 2 * F}));
    return dot(out, R);
  };
  loss();
  std::vector<double> dgu(N * 2 * F);
  be->swiglu_backward(host(dgu, {N, 2 * F}), host(R, {N, F}), host(gu, {N, 2 * F}));
  EXPECT_LT(gradient_error(loss, gu.data(), N * 2 * F, dgu.data()), 1e-6);
}

TEST_F(BackendTest, EmbeddingGradientAndBadToken) {
  const int64_t V = 6, C = 4, N = 5;
  std::vector<int32_t> tokens = {1, 3, 1, 0, 5};
  auto table = random_vector(V * C, 50), R = random_vector(N * C, 51);
  std::vector<double> out(N * C);
  auto loss = [&] {
    be->embedding_forward(host(out, {N, C}), tokens.data(), host(table, {V, C}));
    return dot(out, R);
  };
  loss();
  std::vector<double> dtable(V * C, 0.0);
  be->embedding_backward_weight(host(dtable, {V, C}), tokens.data(), host(R, {N, C}));
  EXPECT_LT(gradient_error(loss, table.data(), V * C, dtable.data()), 1e-6);
  tokens[2] = 6;
  EXPECT_THROW(loss(), Error);
}

TEST_F(BackendTest, CrossEntropyGradientAndValue) {
  const int64_t N = 3, V = 5;
  std::vector<int32_t> targets = {0, 4, 2};
  auto logits = random_vector(N * V, 60);
  std::vector<double> losses(N), lse(N);
  auto loss = [&] {
    be->cross_entropy_forward(host(losses, {N}), host(lse, {N}), host(logits, {N, V}),
                              targets.data());
    return losses[0] + losses[1] + losses[2];
  };
  loss();
  double ref_lse = 0;
  for (int64_t v = 0; v < V; ++v) ref_lse += std::exp(logits[v]);
  EXPECT_NEAR(losses[0], std::log(ref_lse) - logits[0], 1e-12);
  std::vector<double> g = logits;
  be->cross_entropy_backward(host(g, {N, V}), host(lse, {N}), targets.data(), 1.0);
  EXPECT_LT(gradient_error(loss, logits.data(), N * V, g.data()), 1e-6);
}

// The vocabulary-parallel ops on shards [0, 3) and [3, 6) of a 6-row vocabulary: the shards'
// lookups sum to the whole table's, their scatters are the whole scatter's rows.
TEST_F(BackendTest, VocabShardEmbeddingSumsToTheWholeLookup) {
  const int64_t V = 6, C = 4, N = 5, half = V / 2;
  const std::vector<int32_t> tokens = {1, 3, 1, 0, 5};
  auto table = random_vector(V * C, 52), dout = random_vector(N * C, 53);
  std::vector<double> whole(N * C), sum(N * C, 0.0), part(N * C);
  be->embedding_forward(host(whole, {N, C}), tokens.data(), host(table, {V, C}));
  std::vector<double> dwhole(V * C, 0.0), dshards(V * C, 0.0);
  be->embedding_backward_weight(host(dwhole, {V, C}), tokens.data(), host(dout, {N, C}));
  for (int64_t first : {int64_t{0}, half}) {
    be->vocab_embedding_forward(host(part, {N, C}), tokens.data(),
                                Tensor(table.data() + first * C, DType::f64, {half, C}), first);
    for (int64_t i = 0; i < N * C; ++i) sum[i] += part[i];
    be->vocab_embedding_backward_weight(Tensor(dshards.data() + first * C, DType::f64, {half, C}),
                                        tokens.data(), host(dout, {N, C}), first);
  }
  EXPECT_EQ(sum, whole);
  EXPECT_EQ(dshards, dwhole);
}

// Shard statistics combined as the tensor group does (max, rescaled sum of exponentials, target
// logit) give the whole row's lse and loss; the shards' backward is the whole backward's columns.
TEST_F(BackendTest, VocabShardCrossEntropyCombinesToTheWholeLoss) {
  const int64_t N = 3, V = 6, half = V / 2;
  const std::vector<int32_t> targets = {0, 4, 2};
  auto logits = random_vector(N * V, 61);
  std::vector<double> losses(N), lse(N);
  be->cross_entropy_forward(host(losses, {N}), host(lse, {N}), host(logits, {N, V}),
                            targets.data());
  std::vector<double> stats[2], shard[2];
  for (int r = 0; r < 2; ++r) {
    shard[r].resize(N * half);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t v = 0; v < half; ++v) shard[r][n * half + v] = logits[n * V + r * half + v];
    }
    stats[r].resize(3 * N);
    be->vocab_cross_entropy_forward(host(stats[r], {N, 3}), host(shard[r], {N, half}),
                                    targets.data(), r * half);
  }
  std::vector<double> whole_grad = logits, shard_lse(N);
  be->cross_entropy_backward(host(whole_grad, {N, V}), host(lse, {N}), targets.data(), 0.5);
  for (int64_t n = 0; n < N; ++n) {
    const double m = std::max(stats[0][3 * n], stats[1][3 * n]);
    const double s = stats[0][3 * n + 1] * std::exp(stats[0][3 * n] - m) +
                     stats[1][3 * n + 1] * std::exp(stats[1][3 * n] - m);
    shard_lse[n] = m + std::log(s);
    EXPECT_NEAR(shard_lse[n], lse[n], 1e-12) << n;
    EXPECT_NEAR(shard_lse[n] - (stats[0][3 * n + 2] + stats[1][3 * n + 2]), losses[n], 1e-12);
  }
  for (int r = 0; r < 2; ++r) {
    be->vocab_cross_entropy_backward(host(shard[r], {N, half}), host(shard_lse, {N}),
                                     targets.data(), r * half, 0.5);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t v = 0; v < half; ++v) {
        EXPECT_NEAR(shard[r][n * half + v], whole_grad[n * V + r * half + v], 1e-12) << r << n << v;
      }
    }
  }
}

TEST_F(BackendTest, AdamWMatchesTheFormula) {
  std::vector<double> w = {1.0, -2.0}, g = {0.5, 0.25}, m = {0.1, 0.0}, v = {0.01, 0.0};
  AdamWParams p{0.1, 0.9, 0.95, 1e-8, 0.01, 3};
  auto ref_w = w;
  for (int i = 0; i < 2; ++i) {
    const double m1 = 0.9 * m[i] + 0.1 * g[i];
    const double v1 = 0.95 * v[i] + 0.05 * g[i] * g[i];
    const double mh = m1 / (1 - std::pow(0.9, 3)), vh = v1 / (1 - std::pow(0.95, 3));
    ref_w[i] = w[i] * (1 - 0.1 * 0.01) - 0.1 * mh / (std::sqrt(vh) + 1e-8);
  }
  be->adamw_update(host(w, {2}), host(g, {2}), host(m, {2}), host(v, {2}), p);
  EXPECT_NEAR(w[0], ref_w[0], 1e-14);
  EXPECT_NEAR(w[1], ref_w[1], 1e-14);
}

TEST_F(BackendTest, CopyConvertsAndSumSquaresIsExact) {
  std::vector<float> f = {1.5f, -3.0f, 0.1f};
  std::vector<bf16> b(3);
  be->copy(Tensor(b.data(), DType::bf16, {3}), Tensor(f.data(), DType::f32, {3}));
  EXPECT_EQ(bf16_to_float(b[0]), 1.5f);
  EXPECT_EQ(b[2].bits, float_to_bf16(0.1f).bits);
  std::vector<double> x = {3.0, 4.0};
  EXPECT_EQ(be->sum_squares(host(x, {2})), 25.0);
}

#include "backend/cpu/vec_exp.h"

// The bound holds whether or not the compiler contracts the Horner steps into FMAs (-O3
// -march=native does; -O1, as in the sanitizer build, and -ffp-contract=off do not): measured
// worst relative errors are 2.23e-7 with FMA and 2.505e-7 without, against a bound of 2.2 ulps of
// 1.0 (2.2 * 2^-23 = 2.62e-7). The old bound, 2.5e-7, failed by 0.2% without FMA.
TEST(VecExp, WithinTwoUlpOfStdExpWithOrWithoutFmaAndExactAtTheEdges) {
  double worst = 0;
  for (int i = 0; i <= 2000000; ++i) {
    const float x = -87.0f + 175.0f * static_cast<float>(i) / 2000000;
    const double ref = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(cpu::exp_fast(x) - ref) / ref);
  }
  EXPECT_LT(worst, 2.2 * 0x1p-23);  // about two float ulps
  EXPECT_EQ(cpu::exp_fast(0.0f), 1.0f);
  EXPECT_EQ(cpu::exp_fast(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(cpu::exp_fast(-200.0f), 0.0f);
  EXPECT_TRUE(std::isnan(cpu::exp_fast(std::nanf(""))));
}
