// The data-parallel engine in one process and under mpirun: the bucket plan's shards (equal,
// covering the table once across ranks, P / n each when buckets divide), LAMB against a hand
// computation, every ZeRO stage in one process agreeing with stage 0, and (under mpirun) shard
// gathering, the per-rank LAMB trust ratios built from partial norms, and the gradient noise
// scale's measurements against gradients computed rank by rank in one-process runners.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "../comm/mpi_env.h"
#include "backend/backend.h"
#include "model/transformer.h"
#include "optim/lamb.h"
#include "parallel/data.h"
#include "train/run_config.h"
#include "train/step_runner.h"

namespace trillion {
namespace {

const auto* const kMpiEnv = ::testing::AddGlobalTestEnvironment(new testing::MpiEnvironment);

RunConfig tiny(int zero, const std::string& optimizer = "adamw") {
  return load_run_config(std::string(TRILLION_SOURCE_DIR) + "/configs/tiny.toml",
                         {"parallel.zero=" + std::to_string(zero),
                          "optim.name=\"" + optimizer + "\"", "parallel.bucket_mb=0.02"});
}

std::vector<UnitRange> units_of(const ModelConfig& c) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  Transformer model(c, {1, c.seq_len}, *be, tracker);
  std::vector<UnitRange> units;
  for (int u = 0; u < model.num_units(); ++u) units.push_back(model.unit_range(u));
  return units;
}

TEST(BucketPlan, BackwardOrderEqualChunksAndExactCover) {
  const RunConfig c = tiny(0);
  const auto units = units_of(c.model);
  ASSERT_EQ(units.size(), 4u);  // embed, 2 layers, head
  EXPECT_EQ(units[0].size(), 64 * 32);
  EXPECT_EQ(units[1].size(), 9280);
  EXPECT_EQ(units[3].size(), 32 + 64 * 32);
  const int64_t P = units.back().end;
  ASSERT_EQ(P, 22688);
  // 5000-element buckets: {head, layer 1}, {layer 0}, {embed}; one per unit with 0.
  const parallel::BucketPlan plan(units, 5000, 4, 1);
  ASSERT_EQ(plan.buckets().size(), 3u);
  EXPECT_EQ(plan.buckets()[0].first_unit, 2);
  EXPECT_EQ(plan.buckets()[0].last_unit, 3);
  EXPECT_EQ(plan.bucket_of_unit(1), 1);
  EXPECT_EQ(plan.shard_elements(), P / 4);
  EXPECT_EQ(parallel::BucketPlan(units, 0, 4, 0).buckets().size(), 4u);
  // Across the 4 ranks, owned pieces cover every element exactly once, at distinct local slots.
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  Transformer model(c.model, {1, c.model.seq_len}, *be, tracker);
  std::vector<int> covered(P, 0);
  for (int r = 0; r < 4; ++r) {
    const parallel::BucketPlan pr(units, 5000, 4, r);
    int64_t local = 0;
    for (const auto& p : pr.owned_pieces(model.table())) {
      EXPECT_EQ(p.local, local);  // no gaps: buckets divide by 4, so no padding
      local += p.length;
      for (int64_t i = 0; i < p.length; ++i) covered[p.global + i] += 1;
    }
    EXPECT_EQ(local, P / 4);
  }
  EXPECT_EQ(std::count(covered.begin(), covered.end(), 1), P);
  // 3 ranks do not divide 9280: chunks round up and the shard is padded.
  EXPECT_EQ(parallel::BucketPlan(units, 0, 3, 0).shard_elements(),
            (2048 + 2) / 3 + 2 * ((9280 + 2) / 3) + (2080 + 2) / 3);
}

TEST(Lamb, MatchesAHandComputedStep) {
  TensorTable table;
  table.add("w", {2}, true);
  table.add("norm", {1}, false);
  MemoryTracker tracker;
  Buffer p(tracker, MemoryCategory::parameters, DType::f64, 3);
  Buffer g(tracker, MemoryCategory::gradients, DType::f64, 3);
  auto* w = static_cast<double*>(p.raw());
  auto* d = static_cast<double*>(g.raw());
  w[0] = 3, w[1] = 4, w[2] = 2;
  d[0] = 1, d[1] = -2, d[2] = 0.5;
  const AdamWConfig cfg{0.9, 0.99, 1e-8, 0.1};
  Lamb opt(table, full_segments(table), 3, DType::f64, cfg, tracker, nullptr);
  opt.step(p, g, 0.01);
  // Step 1: m_hat = g, v_hat = g^2, so r = g / (|g| + eps) ~ sign(g); u = r + wd * w.
  const double u0 = 1 / (1 + 1e-8) + 0.3, u1 = -2 / (2 + 1e-8) + 0.4;
  const double ratio_w = 5.0 / std::sqrt(u0 * u0 + u1 * u1);
  EXPECT_NEAR(opt.trust_ratios()[0], ratio_w, 1e-12);
  EXPECT_NEAR(w[0], 3 - 0.01 * ratio_w * u0, 1e-12);
  EXPECT_NEAR(w[1], 4 - 0.01 * ratio_w * u1, 1e-12);
  const double u2 = 0.5 / (0.5 + 1e-8);  // no weight decay on the norm
  EXPECT_NEAR(opt.trust_ratios()[1], 2.0 / u2, 1e-12);
  EXPECT_NEAR(w[2], 2 - 0.01 * (2.0 / u2) * u2, 1e-12);
}

// Runs `steps` steps of tiny in one process; returns losses and the final parameters.
std::pair<std::vector<double>, std::vector<float>> run_one_process(const RunConfig& c, int steps) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  StepRunner runner(c, *be, tracker);
  runner.init_parameters(c.train.seed);
  std::vector<double> losses;
  const int64_t n = c.train.micro_batch * c.model.seq_len;
  for (int s = 0; s < steps; ++s) {
    auto batch = [&](int64_t step, int64_t micro, int32_t* tok, int32_t* tgt) {
      for (int64_t i = 0; i < n; ++i) {
        tok[i] = static_cast<int32_t>((step * 7 + micro * 3 + i * 5) % c.model.vocab_size);
        tgt[i] = static_cast<int32_t>((step + i * 11) % c.model.vocab_size);
      }
    };
    losses.push_back(runner.step(s, batch).loss);
  }
  Buffer full(tracker, MemoryCategory::workspace, DType::f32, runner.table().total_elements());
  runner.data_parallel().gather_parameters(full);
  const auto* f = static_cast<const float*>(full.raw());
  return {losses, std::vector<float>(f, f + full.count())};
}

TEST(OneProcess, EveryZeroStageAndLambTrainLikeStageZero) {
  for (const std::string opt : {"adamw", "lamb"}) {
    const auto [ref_loss, ref_w] = run_one_process(tiny(0, opt), 3);
    for (int zero = 1; zero <= 3; ++zero) {
      const auto [loss, w] = run_one_process(tiny(zero, opt), 3);
      for (size_t s = 0; s < loss.size(); ++s) EXPECT_NEAR(loss[s], ref_loss[s], 1e-6) << zero;
      double max_diff = 0;
      for (size_t i = 0; i < w.size(); ++i)
        max_diff = std::max<double>(max_diff, std::abs(w[i] - ref_w[i]));
      EXPECT_LT(max_diff, 1e-5) << opt << " zero " << zero;
    }
  }
}

TEST(OneProcess, StageZeroIsTheOneProcessAlgorithmBitwise) {
  // Stage 0 in a group of one does exactly what the pre-parallel StepRunner did: same
  // gradients, same clip, same AdamW calls. Checked against a hand-driven model + AdamW.
  const RunConfig c = tiny(0);
  const auto [loss, w] = run_one_process(c, 2);
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  Transformer model(c.model, {c.train.micro_batch, c.model.seq_len}, *be, tracker);
  AdamW opt(model.table(), c.model.dtype,
            {c.optim.beta1, c.optim.beta2, c.optim.eps, c.optim.weight_decay}, *be, tracker);
  model.init_parameters(c.train.seed);
  StepRunner schedule_only(c, *be, tracker);
  const int64_t n = c.train.micro_batch * c.model.seq_len;
  std::vector<int32_t> tok(n), tgt(n);
  for (int s = 0; s < 2; ++s) {
    for (int64_t i = 0; i < n; ++i) {
      tok[i] = static_cast<int32_t>((s * 7 + i * 5) % c.model.vocab_size);
      tgt[i] = static_cast<int32_t>((s + i * 11) % c.model.vocab_size);
    }
    model.zero_grad();
    EXPECT_EQ(model.forward(tok.data(), tgt.data()), loss[s]);
    model.backward(1.0 / static_cast<double>(n));
    clip_grad_norm(*be, model.gradients(), c.optim.grad_clip);
    opt.step(model.parameters(), model.gradients(), schedule_only.lr_schedule().at(s));
  }
  const auto* p = static_cast<const float*>(model.parameters().raw());
  EXPECT_EQ(std::vector<float>(p, p + model.parameters().count()), w);
}

TEST(MpiEngine, GatherAndTakeShardsRoundTrip) {
  REQUIRE_MPI(2);
  comm::Communicator& world = *testing::mpi_world();
  const RunConfig c = tiny(3);
  const auto units = units_of(c.model);
  const parallel::BucketPlan plan(units, 0, world.size(), world.rank());
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const int64_t P = units.back().end;
  Buffer full(tracker, MemoryCategory::workspace, DType::f32, P);
  Buffer back(tracker, MemoryCategory::workspace, DType::f32, P);
  Buffer shard(tracker, MemoryCategory::parameters, DType::f32, plan.shard_elements());
  auto* f = static_cast<float*>(full.raw());
  for (int64_t i = 0; i < P; ++i) f[i] = static_cast<float>(i % 1000) * 0.5f;
  parallel::take_shard(*be, plan, full, shard);
  parallel::gather_shards(world, *be, tracker, plan, shard, back, MemoryCategory::workspace);
  EXPECT_EQ(std::memcmp(full.raw(), back.raw(), full.bytes()), 0);
}

TEST(MpiEngine, LambTrustRatiosComeFromNormsAcrossShards) {
  REQUIRE_MPI(2);
  comm::Communicator& world = *testing::mpi_world();
  // One tensor of 4n elements split evenly; every rank's ratio must be the whole tensor's.
  const int n = world.size(), r = world.rank();
  TensorTable table;
  table.add("w", {4 * n}, false);
  MemoryTracker tracker;
  Buffer p(tracker, MemoryCategory::parameters, DType::f64, 4);
  Buffer g(tracker, MemoryCategory::gradients, DType::f64, 4);
  double w_sq = 0, u_sq = 0;
  for (int i = 0; i < 4 * n; ++i) {
    const double wi = 1.0 + i, gi = (i % 3) - 1.0 + 0.25;
    w_sq += wi * wi;
    const double u = gi / (std::abs(gi) + 1e-8);
    u_sq += u * u;
    if (i / 4 == r) {
      static_cast<double*>(p.raw())[i % 4] = wi;
      static_cast<double*>(g.raw())[i % 4] = gi;
    }
  }
  Lamb opt(table, {{0, 0, 0, 0, 4}}, 4, DType::f64, {0.9, 0.99, 1e-8, 0.0}, tracker,
           [&](std::vector<double>& v) {
             world.all_reduce(Tensor(v.data(), DType::f64, {static_cast<int64_t>(v.size())}));
           });
  opt.step(p, g, 0.1);
  EXPECT_NEAR(opt.trust_ratios()[0], std::sqrt(w_sq / u_sq), 1e-9);
}

// The noise scale's inputs (StepStats::noise) equal what one-process runners compute from each
// small batch alone: the mean of their squared gradient norms, and the squared norm of their
// mean. ZeRO 0-1 make one estimate per rank (over its grad_accum micro-batches), ZeRO 2 one per
// rank and micro-batch.
TEST(MpiEngine, NoiseScaleSamplesAreTheSmallBatchGradientNorms) {
  REQUIRE_MPI(2);
  comm::Communicator& world = *testing::mpi_world();
  const int n = world.size(), r = world.rank();
  for (int zero : {0, 1, 2}) {
    SCOPED_TRACE("zero " + std::to_string(zero));
    const int64_t accum = 2;
    RunConfig c = load_run_config(
        std::string(TRILLION_SOURCE_DIR) + "/configs/tiny.toml",
        {"parallel.zero=" + std::to_string(zero), "parallel.bucket_mb=0.02", "optim.grad_clip=0",
         "train.grad_accum=" + std::to_string(accum), "train.micro_batch=" + std::to_string(2 * n),
         "parallel.dp=" + std::to_string(n)});
    const int64_t T = c.model.seq_len, B_local = 2, V = c.model.vocab_size;
    // Tokens of (rank, micro-batch): any fixed function of them.
    auto fill = [&](int rank, int64_t micro, int32_t* tokens, int32_t* targets) {
      for (int64_t i = 0; i < B_local * T; ++i) {
        tokens[i] = static_cast<int32_t>((7 * i + 13 * rank + 5 * micro + i * i % 11) % V);
        targets[i] = static_cast<int32_t>((3 * i + 11 * rank + 17 * micro + 1) % V);
      }
    };
    MemoryTracker tracker;
    auto be = make_cpu_backend(tracker);
    StepRunner runner(c, *be, tracker, &world);
    runner.init_parameters(c.train.seed);
    const StepStats st = runner.step(
        0, [&](int64_t, int64_t micro, int32_t* tok, int32_t* tgt) { fill(r, micro, tok, tgt); });
    ASSERT_TRUE(st.noise_valid);
    const int64_t per_rank = zero >= 2 ? accum : 1;  // estimates
    const double tokens = static_cast<double>(n * B_local * T * accum);
    EXPECT_EQ(st.noise.big_batch, tokens);
    EXPECT_EQ(st.noise.small_batch, tokens / static_cast<double>(n * per_rank));

    // Each small batch alone, in one process: its gradient is the mean over its tokens.
    RunConfig one = c;
    one.parallel.dp = 1;
    one.parallel.zero = 0;
    one.train.micro_batch = B_local;
    one.train.grad_accum = accum / per_rank;
    const int64_t P = runner.global_elements();
    std::vector<double> mean(P, 0.0);
    double small_sq = 0;
    for (int64_t e = 0; e < per_rank; ++e) {
      MemoryTracker t1;
      auto be1 = make_cpu_backend(t1);
      StepRunner alone(one, *be1, t1);
      alone.init_parameters(c.train.seed);
      alone.step(0, [&](int64_t, int64_t micro, int32_t* tok, int32_t* tgt) {
        fill(r, per_rank > 1 ? e : micro, tok, tgt);
      });
      const auto* g = static_cast<const float*>(alone.parameters().gradients().raw());
      for (int64_t i = 0; i < P; ++i) {
        small_sq += static_cast<double>(g[i]) * g[i];
        mean[i] += g[i];
      }
    }
    world.all_reduce(Tensor(&small_sq, DType::f64, {1}));
    world.all_reduce(Tensor(mean.data(), DType::f64, {P}));
    double big_sq = 0;
    for (double& m : mean) {
      m /= static_cast<double>(n * per_rank);
      big_sq += m * m;
    }
    small_sq /= static_cast<double>(n * per_rank);
    EXPECT_NEAR(st.noise.small_sq_norm / small_sq, 1.0, 1e-5);
    EXPECT_NEAR(st.noise.big_sq_norm / big_sq, 1.0, 1e-5);
    EXPECT_NEAR(st.grad_norm * st.grad_norm / big_sq, 1.0, 1e-5);
    EXPECT_GT(small_sq, 1.05 * big_sq);  // the small batches are noisier than their mean
  }
}

}  // namespace
}  // namespace trillion
