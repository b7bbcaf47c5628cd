// The scale-out optimizer components: the gradient-noise-scale estimator recovers a known
// B_simple from synthetic gradients with a set mean and covariance; DiLoCo's outer Nesterov step
// against hand-computed values and its averaging limit; Streaming DiLoCo's fragment schedule;
// the outer exchange's bf16 / fp4 quantisation within its stated error bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "optim/noise_scale.h"
#include "optim/outer_nesterov.h"
#include "optim/outer_quantize.h"
#include "optim/streaming_schedule.h"

namespace trillion {
namespace {

// --- gradient noise scale -------------------------------------------------------------------

TEST(NoiseScale, UnbiasedTermsAreExactOnExpectedNorms) {
  // E|G_B|^2 = |G|^2 + tr(Sigma)/B with |G|^2 = 2, tr(Sigma) = 300.
  NoiseScaleSample s{.small_sq_norm = 2 + 300.0 / 16,
                     .small_batch = 16,
                     .big_sq_norm = 2 + 300.0 / 128,
                     .big_batch = 128};
  double g2 = 0, trace = 0;
  unbiased_noise_terms(s, &g2, &trace);
  EXPECT_NEAR(g2, 2.0, 1e-12);
  EXPECT_NEAR(trace, 300.0, 1e-9);
  NoiseScaleEstimator e(0.9);
  for (int i = 0; i < 3; ++i) e.update(s);
  EXPECT_TRUE(e.last().valid);
  EXPECT_NEAR(e.last().b_simple, 150.0, 1e-9);
  EXPECT_NEAR(e.last().ema_gradient_sq, 2.0, 1e-12);  // bias-corrected from the first step
  s.big_batch = 16;
  EXPECT_THROW(e.update(s), Error);
}

// Per-example gradients g = G + sigma (.) z + u w (z ~ N(0, I), w ~ N(0, 1)): covariance
// Sigma = diag(sigma^2) + u u^T, tr(Sigma) = sum sigma^2 + |u|^2. K ranks each average b examples,
// so a rank's gradient is G + (sigma (.) z + u w) / sqrt(b) with fresh normals.
TEST(NoiseScale, RecoversAKnownBSimpleFromSyntheticGradients) {
  const int dims = 100, ranks = 8, per_rank = 8, steps = 3000;
  std::vector<double> mean(dims, 0.1), sigma(dims), u(dims);
  double g2 = 0, trace = 0;
  for (int j = 0; j < dims; ++j) {
    sigma[j] = std::sqrt(0.2 + 0.6 * (j % 5) / 4.0);
    u[j] = 0.3 * std::sin(j);
    g2 += mean[j] * mean[j];
    trace += sigma[j] * sigma[j] + u[j] * u[j];
  }
  const double truth = trace / g2;  // 54.50
  for (const uint64_t seed : {2024, 7, 99}) {
    const Philox rng(seed, "noise_scale_test");
    NoiseScaleEstimator estimator(0.99);
    double naive = 0, sum_g2 = 0, sum_trace = 0;
    std::vector<double> big(dims), rank_grad(dims);
    for (int t = 0; t < steps; ++t) {
      std::fill(big.begin(), big.end(), 0.0);
      std::vector<double> small_sq(ranks, 0.0);
      for (int k = 0; k < ranks; ++k) {
        const uint64_t base = (static_cast<uint64_t>(t) * ranks + k) * (dims + 1);
        const double w = rng.normal(base + dims);
        for (int j = 0; j < dims; ++j) {
          rank_grad[j] =
              mean[j] + (sigma[j] * rng.normal(base + j) + u[j] * w) / std::sqrt(per_rank);
          small_sq[k] += rank_grad[j] * rank_grad[j];
          big[j] += rank_grad[j] / ranks;
        }
      }
      const double big_sq = std::inner_product(big.begin(), big.end(), big.begin(), 0.0);
      const NoiseScaleEstimate e = estimator.update(small_sq, per_rank, big_sq);
      sum_g2 += e.gradient_sq;
      sum_trace += e.trace;
      naive += big_sq / steps;
    }
    // The moving average at the end, and the mean of every step's unbiased terms.
    EXPECT_TRUE(estimator.last().valid);
    EXPECT_NEAR(estimator.last().b_simple, truth, 0.10 * truth) << "seed " << seed;
    EXPECT_NEAR(sum_g2 / steps, g2, 0.03 * g2) << "seed " << seed;
    EXPECT_NEAR(sum_trace / steps, trace, 0.03 * trace) << "seed " << seed;
    RecordProperty("b_simple_seed_" + std::to_string(seed),
                   std::to_string(estimator.last().b_simple) + " (truth " + std::to_string(truth) +
                       ", mean over steps " + std::to_string(sum_trace / sum_g2) + ")");
    // Without the correction, tr(Sigma)/|G_big|^2 is far off: |G_big|^2 carries tr(Sigma)/B_big.
    EXPECT_LT(trace / naive, 0.7 * truth);
  }
}

TEST(NoiseScale, StateRoundTripsAndBadInputsAreErrors) {
  NoiseScaleEstimator a(0.5), b(0.5);
  const NoiseScaleSample s{
      .small_sq_norm = 3, .small_batch = 1, .big_sq_norm = 1.5, .big_batch = 4};
  a.update(s);
  b.set_state(a.state());
  EXPECT_EQ(a.update(s).b_simple, b.update(s).b_simple);
  EXPECT_THROW(NoiseScaleEstimator(1.0), Error);
  EXPECT_THROW(a.update(std::vector<double>{1.0}, 4, 1.0), Error);  // one rank measures nothing
}

// --- DiLoCo's outer optimizer -----------------------------------------------------------------

TEST(OuterNesterov, StepsAreTheHandComputedNesterovSequence) {
  OuterNesterov opt(3, {.lr = 0.7, .momentum = 0.9, .nesterov = true});
  std::vector<float> theta = {1.0f, -2.0f, 0.5f};
  const std::vector<float> delta = {0.1f, 0.2f, -0.3f};
  // Step 1: v = d, theta -= 0.7 (d + 0.9 d) = 1.33 d. Step 2: v = 1.9 d, theta -= 0.7 (d + 1.71 d).
  opt.step(theta, delta);
  opt.step(theta, delta);
  const double total = 0.7 * 1.9 + 0.7 * 2.71;  // 3.227
  const std::vector<double> start = {1.0, -2.0, 0.5};
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(theta[i], start[i] - total * delta[i], 1e-6) << i;
    EXPECT_NEAR(opt.momentum()[i], 1.9 * delta[i], 1e-7) << i;
  }
  OuterNesterov plain(1, {.lr = 0.5, .momentum = 0.9, .nesterov = false});
  std::vector<float> p = {1.0f};
  const std::vector<float> d1 = {1.0f};
  plain.step(p, d1);
  plain.step(p, d1);  // v = 1 then 1.9: p = 1 - 0.5 - 0.95
  EXPECT_NEAR(p[0], -0.45f, 1e-6);
}

TEST(OuterNesterov, UnitLrWithoutMomentumIsExactParameterAveraging) {
  // Two islands end at different places; the outer step lands exactly on their average. Start
  // and end within a factor two of each other (weights move little per round), so start - end
  // is exact (Sterbenz) and start - (start - end) gives back end.
  const Philox rng(1, "outer");
  const int n = 1000;
  std::vector<float> start(n), end_a(n), end_b(n), avg(n), da(n), db(n), delta(n);
  for (int i = 0; i < n; ++i) {
    start[i] = static_cast<float>((i % 2 ? 1 : -1) * (1 + 0.1 * rng.normal(i)));
    end_a[i] = start[i] - 0.01f * static_cast<float>(rng.normal(n + i));
    end_b[i] = start[i] - 0.01f * static_cast<float>(rng.normal(2 * n + i));
  }
  OuterNesterov::pseudo_gradient(start, end_a, da);
  OuterNesterov::pseudo_gradient(start, end_b, db);
  for (int i = 0; i < n; ++i) {
    delta[i] = 0.5f * (da[i] + db[i]);
    avg[i] = start[i] - delta[i];  // what the averaged islands hold
  }
  OuterNesterov opt(n, {.lr = 1.0, .momentum = 0.0});
  std::vector<float> theta = start;
  opt.step(theta, delta);
  EXPECT_EQ(theta, avg);
  // One island, H = 1: the outer step returns exactly the island's parameters (synchronous DP).
  theta = start;
  opt.step(theta, da);
  EXPECT_EQ(theta, end_a);
}

TEST(OuterNesterov, FragmentsUpdateOnlyTheirSliceAndMatchAWholeStep) {
  const int n = 10;
  std::vector<float> whole(n), parts(n), delta(n);
  for (int i = 0; i < n; ++i) {
    whole[i] = parts[i] = static_cast<float>(i);
    delta[i] = 0.1f * static_cast<float>(i + 1);
  }
  OuterNesterov a(n, {}), b(n, {});
  a.step(whole, delta);
  b.step(std::span<float>(parts).subspan(0, 4), std::span<const float>(delta).subspan(0, 4), 0);
  EXPECT_EQ(b.momentum()[5], 0.0f);  // untouched until its fragment's turn
  b.step(std::span<float>(parts).subspan(4), std::span<const float>(delta).subspan(4), 4);
  EXPECT_EQ(parts, whole);
  EXPECT_TRUE(std::ranges::equal(b.momentum(), a.momentum()));
  EXPECT_THROW(OuterNesterov(1, {.lr = 0.7, .momentum = 1.0}), Error);
  EXPECT_THROW(b.set_momentum(std::vector<float>(3)), Error);
}

// --- Streaming DiLoCo's schedule ----------------------------------------------------------

TEST(StreamingSchedule, FragmentsAreStaggeredEvenlyAndEachSyncsOncePerRound) {
  const FragmentSchedule s({.inner_steps = 12, .fragments = 4, .overlap_steps = 2}, 8);
  // Strided: layer l in fragment l mod 4.
  EXPECT_EQ(s.layers_of(1), (std::vector<int>{1, 5}));
  std::map<int, std::vector<int64_t>> sends;
  for (int64_t t = 1; t <= 48; ++t) {
    const auto f = s.sends_after(t);
    EXPECT_LE(f.size(), 1u) << "at most one exchange starts per step";
    for (int p : f) sends[p].push_back(t);
  }
  // Fragment p after steps 3(p+1), then every 12.
  EXPECT_EQ(sends[0], (std::vector<int64_t>{3, 15, 27, 39}));
  EXPECT_EQ(sends[3], (std::vector<int64_t>{12, 24, 36, 48}));
  for (int p = 0; p < 4; ++p) {
    EXPECT_EQ(s.send_step(p, 1), sends[p][1]);
    for (size_t k = 1; k < sends[p].size(); ++k) EXPECT_EQ(sends[p][k] - sends[p][k - 1], 12);
  }
  // Each exchange lands tau = 2 steps after it starts.
  EXPECT_EQ(s.merges_after(5), (std::vector<int>{0}));
  EXPECT_TRUE(s.merges_after(3).empty());
  // F = 1, tau = 0 is DiLoCo: everything every H steps, merged at once.
  const FragmentSchedule d({.inner_steps = 5, .fragments = 1}, 3);
  EXPECT_EQ(d.sends_after(10), (std::vector<int>{0}));
  EXPECT_EQ(d.merges_after(10), (std::vector<int>{0}));
  EXPECT_TRUE(d.sends_after(7).empty());
  EXPECT_EQ(d.layers_of(0), (std::vector<int>{0, 1, 2}));
}

TEST(StreamingSchedule, SequentialFragmentsAreContiguousAndBadConfigsNameTheKey) {
  const FragmentSchedule s(
      {.inner_steps = 6, .fragments = 3, .pattern = FragmentPattern::sequential}, 8);
  EXPECT_EQ(s.layers_of(0), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(s.layers_of(1), (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(s.layers_of(2), (std::vector<int>{6, 7}));
  const auto message = [](const StreamingConfig& c, int layers) {
    try {
      FragmentSchedule f(c, layers);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message({.inner_steps = 10, .fragments = 3}, 8).find("diloco.fragments = 3"),
            std::string::npos);
  EXPECT_NE(message({.inner_steps = 10, .fragments = 2, .overlap_steps = 6}, 8)
                .find("diloco.overlap_steps = 6"),
            std::string::npos);
  EXPECT_NE(message({.inner_steps = 8, .fragments = 8}, 4).find("exceeds the model's 4 layers"),
            std::string::npos);
}

TEST(StreamingSchedule, MergeMixesLocalAndGlobal) {
  std::vector<float> local = {1, 2, 3}, global = {3, 2, 1};
  merge_fragment(local.data(), global.data(), 3, 0.5);
  EXPECT_EQ(local, (std::vector<float>{2, 2, 2}));
  merge_fragment(local.data(), global.data(), 3, 0.0);
  EXPECT_EQ(local, global);
}

// --- outer exchange quantisation ------------------------------------------------------------

TEST(OuterQuantize, Fp4GridValuesAreExactAndErrorsWithinBounds) {
  // One block whose absmax is 6: scale 1, so the E2M1 grid itself round-trips exactly.
  std::vector<float> grid = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.5f, -6, -3, -0.0f};
  std::vector<float> back(grid.size());
  unpack_fp4(pack_fp4(grid), back);
  for (size_t i = 0; i < grid.size(); ++i) {
    EXPECT_EQ(back[i], grid[i]) << i;
    EXPECT_EQ(std::signbit(back[i]), std::signbit(grid[i])) << i;
  }
  // Ties go to the even code: 0.25 -> 0, 0.75 -> 1, 5 -> 4 (scale 1).
  std::vector<float> ties = {0.25f, 0.75f, 1.25f, 5.0f, 6.0f};
  quantize_in_place(OuterPrecision::fp4, ties);
  EXPECT_EQ(ties, (std::vector<float>{0, 1, 1, 4, 6}));
  // Random values over several blocks: |x - q| <= absmax / 6 per block.
  const Philox rng(5, "fp4");
  std::vector<float> x(3 * kFp4Block + 17);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(rng.normal(i) * (1 + i / 128));
  std::vector<float> q = x;
  quantize_in_place(OuterPrecision::fp4, q);
  const Fp4Packed packed = pack_fp4(x);
  EXPECT_EQ(packed.codes.size(), (x.size() + 1) / 2);
  EXPECT_EQ(packed.scales.size(), 4u);
  EXPECT_EQ(packed.bytes(), (x.size() + 1) / 2 + 16);
  for (size_t b = 0; b < x.size(); b += kFp4Block) {
    float absmax = 0;
    for (size_t i = b; i < std::min(x.size(), b + kFp4Block); ++i)
      absmax = std::max(absmax, std::fabs(x[i]));
    EXPECT_FLOAT_EQ(packed.scales[b / kFp4Block], absmax / 6);
    for (size_t i = b; i < std::min(x.size(), b + kFp4Block); ++i) {
      EXPECT_LE(std::fabs(x[i] - q[i]), absmax / 6 * 1.0001f) << i;
      if (std::fabs(x[i]) <= absmax / 6) {
        EXPECT_LE(std::fabs(x[i] - q[i]), absmax / 24 * 1.0001f);
      }
    }
  }
  std::vector<float> zeros(10, 0.0f);
  EXPECT_EQ(pack_fp4(zeros).scales[0], 0.0f);
}

TEST(OuterQuantize, Bf16RoundsToNearestAndSizesAreTheWireBytes) {
  const Philox rng(6, "bf16");
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(rng.normal(i));
  std::vector<float> q = x;
  quantize_in_place(OuterPrecision::bf16, q);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_LE(std::fabs(x[i] - q[i]), std::ldexp(std::fabs(x[i]), -8)) << i;  // half an ulp
  }
  EXPECT_EQ(outer_bytes_per_element(OuterPrecision::fp32), 4);
  EXPECT_EQ(outer_bytes_per_element(OuterPrecision::bf16), 2);
  EXPECT_DOUBLE_EQ(outer_bytes_per_element(OuterPrecision::fp4), 0.53125);
  EXPECT_EQ(parse_outer_precision("fp4", "diloco.outer_precision"), OuterPrecision::fp4);
  EXPECT_THROW(parse_outer_precision("int4", "diloco.outer_precision"), Error);
}

}  // namespace
}  // namespace trillion
