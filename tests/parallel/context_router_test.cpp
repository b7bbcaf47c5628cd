// The MoE router under context parallelism (model/router.h) against the one-process router on the
// whole sequences, in f64. Under mpirun (CTest's parallel_mpi_2 / _4: cp = the world size), for
// zigzag and contiguous splits and both routers (sigmoid with bias, softmax), each rank routes its
// T/cp rows of B sequences: its chosen experts and gates equal the reference rows at their
// global positions, its f (the balance loss's fraction per sequence and expert) equals the
// whole sequence's, the ranks' balance losses add up to the reference's, and dz and dx (balance
// loss + gates) equal the reference rows to 1e-12. The cp group carries exactly one all-reduce of
// B x E f64 per forward and nothing in backward.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "../comm/mpi_env.h"
#include "core/philox.h"
#include "model/router.h"

namespace trillion {
namespace {

constexpr int64_t kB = 3, kT = 16, kC = 6, kE = 8, kK = 2;

std::vector<double> random_values(int64_t n, uint64_t seed, double scale) {
  Philox rng(seed, "context-router-test");
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = scale * rng.normal(i);
  return v;
}

Tensor t2(std::vector<double>& v, int64_t rows) {
  return Tensor(v.data(), DType::f64, {rows, static_cast<int64_t>(v.size()) / rows});
}

struct Routed {
  std::vector<double> scores, gates, dz, dx;
  Routing routing;
};

// Routes x [B * seq, C] (B sequences of `seq` rows) and runs the router's backward_input with
// dgates, on a context of cp ranks over `group` (nullptr: one process).
Routed route(Backend& be, const MoeConfig& mc, std::vector<double> x, std::vector<double> w,
             std::vector<double> bias, const std::vector<double>& dgates, int64_t seq,
             SequenceSplit split, comm::Communicator* group) {
  ParallelContext ctx;
  ctx.shape.batch = kB, ctx.shape.seq = seq, ctx.shape.d_model = kC, ctx.shape.experts = kE;
  ctx.sequence = split;
  ctx.cp = group;
  Router router(be, ctx, mc);
  const int64_t N = kB * seq;
  Routed out;
  out.scores.assign(N * kE, 0), out.gates.assign(N * kK, 0);
  out.dz.assign(N * kE, 0), out.dx.assign(N * kC, 0);
  out.routing.scores = t2(out.scores, N);
  out.routing.gates = t2(out.gates, N);
  RouterWeights weights{t2(w, kE), Tensor()};
  if (mc.router == "sigmoid_bias") weights.bias = Tensor(bias.data(), DType::f64, {kE});
  router.forward(t2(x, N), weights, out.routing);
  // grad_scale: one over the step's tokens, the whole sequences' (as the trainer's).
  router.backward_input(t2(out.dx, N), t2(out.dz, N), dgates, weights, out.routing,
                        1.0 / static_cast<double>(kB * kT));
  return out;
}

void check(const std::string& router_kind, CpSplit kind) {
  comm::Communicator& world = *testing::mpi_world();
  const int cp = world.size(), rank = world.rank();
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  MoeConfig mc;
  mc.n_routed_experts = kE, mc.top_k = kK, mc.expert_ffn = 4, mc.router = router_kind;
  mc.balance_loss_alpha = 0.3;  // large, so its gradient is most of dz
  const int64_t N = kB * kT, Tl = kT / cp, Nl = kB * Tl;
  const std::vector<double> x = random_values(N * kC, 1, 1.0), w = random_values(kE * kC, 2, 0.5),
                            bias = random_values(kE, 3, 0.05),
                            dgates = random_values(N * kK, 4, 1.0);
  const Routed ref = route(*be, mc, x, w, bias, dgates, kT, SequenceSplit{}, nullptr);

  const SequenceSplit split{cp, kind};
  const std::vector<int64_t> pos = split.positions(kT, rank);
  std::vector<double> xl(Nl * kC), dgl(Nl * kK);
  auto global_row = [&](int64_t row) { return (row / Tl) * kT + pos[row % Tl]; };
  for (int64_t row = 0; row < Nl; ++row) {
    std::copy_n(&x[global_row(row) * kC], kC, &xl[row * kC]);
    std::copy_n(&dgates[global_row(row) * kK], kK, &dgl[row * kK]);
  }
  const comm::CommCounters before = world.counters();
  const Routed got = route(*be, mc, xl, w, bias, dgl, Tl, split, &world);
  const comm::CommCounters used = world.counters() - before;

  for (int64_t row = 0; row < Nl; ++row) {
    const int64_t g = global_row(row);
    for (int64_t k = 0; k < kK; ++k) {
      ASSERT_EQ(got.routing.expert[row * kK + k], ref.routing.expert[g * kK + k]) << "row " << row;
      EXPECT_NEAR(got.gates[row * kK + k], ref.gates[g * kK + k], 1e-14) << "row " << row;
    }
    for (int64_t e = 0; e < kE; ++e) {
      EXPECT_NEAR(got.dz[row * kE + e], ref.dz[g * kE + e],
                  1e-12 * (1 + std::abs(ref.dz[g * kE + e])))
          << "dz row " << row << " expert " << e;
    }
    for (int64_t c = 0; c < kC; ++c) {
      EXPECT_NEAR(got.dx[row * kC + c], ref.dx[g * kC + c],
                  1e-12 * (1 + std::abs(ref.dx[g * kC + c])))
          << "dx row " << row;
    }
  }
  ASSERT_EQ(got.routing.f.size(), ref.routing.f.size());
  for (size_t i = 0; i < ref.routing.f.size(); ++i) {
    EXPECT_NEAR(got.routing.f[i], ref.routing.f[i], 1e-15) << "f " << i;
  }
  double balance = got.routing.balance_loss;
  world.all_reduce(Tensor(&balance, DType::f64, {1}));
  EXPECT_GT(ref.routing.balance_loss, 0.0);
  EXPECT_NEAR(balance, ref.routing.balance_loss, 1e-14 * ref.routing.balance_loss);
  // The f counts' all-reduce, B x E f64: a ring all-reduce sends 2 (cp - 1) / cp of it. Nothing
  // else (backward uses the summed f).
  const uint64_t f_bytes = kB * kE * 8;
  EXPECT_EQ(used.sent(comm::Collective::all_reduce), 2 * (cp - 1) * f_bytes / cp);
  EXPECT_EQ(used.total_sent(), 2 * (cp - 1) * f_bytes / cp);
}

TEST(MpiContextRouter, SigmoidZigzagEqualsOneProcess) {
  REQUIRE_MPI(2);
  check("sigmoid_bias", CpSplit::zigzag);
}

TEST(MpiContextRouter, SoftmaxContiguousEqualsOneProcess) {
  REQUIRE_MPI(2);
  check("softmax_aux", CpSplit::contiguous);
}

}  // namespace
}  // namespace trillion
