// Mixture of Experts across ranks, under `trillion launch`, against the one-process run of
// configs/moe-tiny.toml (1 dense + 2 MoE layers, 8 routed experts top-2 + 1 shared, dropless):
// - expert parallelism ep in {2, 4} with dp (experts split over ep, dense over dp), ZeRO 0 to 3,
//   and with the pipeline executor (zb-h1, DualPipe, DualPipe with ZeRO-3), and ZeRO-3 at ep 1:
//   per-step losses and final weights within 1e-5 (`trillion compare`);
// - every rank's parameter, gradient and optimizer bytes == plan/'s per-rank MoE parameters
//   (plan::params_of_rank: dense and expert parameters of its stages) through
//   plan::rank_model_states with fp32 sizes, dense over dp and experts over dp / ep (ZeRO-3: the
//   routing biases whole, outside the stores), exactly; under ZeRO-2/3 every group's bytes per
//   step == its reduce-scatter (and ZeRO-3 all-gather) of the parameters it shards;
// - rank 0's all-to-all bytes per step == 2 (R_out + R_in) C 4 + the count exchanges, and its
//   routed rows R_out + R_local == tokens x top-k per MoE layer and micro-batch (dropless);
// - balance: on a low-entropy Markov corpus softmax top-k without an auxiliary loss collapses
//   (mean max/mean load >= 2 over steps 41-60) while sigmoid routing with the aux-loss-free bias
//   and no balance loss stays <= 1.3 over the same steps;
// - a checkpoint written at dp 2 ep 2 resumes at dp 2 ep 1 (and one written at ep 1 at ep 2), one
//   written at ep 2 ZeRO-3 at ep 1 ZeRO-2 and one written at ep 1 ZeRO-1 at ep 2 ZeRO-3, and each
//   continues the one-process run (checkpoints hold every expert once, in the global layout).
#include <gtest/gtest.h>

#include <fstream>

#include "../train/cli_util.h"
#include "model/config.h"
#include "train/run_config.h"
#include "plan/layout.h"
#include "plan/memory.h"
#include "schedule/action.h"

namespace trillion {
namespace {

using testing::config_path;
using testing::fresh_dir;
using testing::read_json;
using testing::run_trillion;
using testing::shared_run;
using testing::one_thread_per_rank;
using testing::read_metrics;

const std::string kEnv = one_thread_per_rank();

// moe-tiny: 4 sequences of 32 tokens per micro-batch, 4 micro-batches (DualPipe needs >= 2 pp).
constexpr int kMicro = 4, kBatch = 4, kSeq = 32, kWidth = 32, kExperts = 8, kTopK = 2;

std::string flags() {
  return "train " + config_path("moe-tiny.toml") +
         " --quiet --set train.steps=3 --set train.log_every=1 --set train.grad_accum=" +
         std::to_string(kMicro);
}

struct Layout {
  int dp, ep, zero, pp;
  std::string schedule;
  std::string name;
};
void PrintTo(const Layout& l, std::ostream* os) {
  *os << l.name;
}

class ExpertParallel : public ::testing::TestWithParam<Layout> {};

// ZeRO-2/3 at pp 1, every step's bytes per collective on rank 0, exactly: the dense tensors (but
// the routing biases ZeRO-3 keeps whole) reduce-scatter over dp and the routed experts over edp
// (over dp too with ep = 1) once per micro-batch, (n - 1)/n of their fp32 values each time;
// ZeRO-2 all-gathers the updated parameters once per step, ZeRO-3 gathers them in the forward
// and again in the backward pass of every micro-batch.
void expect_zero_group_bytes(const Layout& l, const ModelConfig& mc, const std::string& run) {
  plan::Layout pl;
  pl.dp = l.dp, pl.ep = l.ep;
  const plan::LocalParams local =
      plan::params_of_rank(mc.spec(), pl, plan::pipeline_shape(mc.spec(), pl), 0);
  const double dense = local.dense - (l.zero == 3 ? local.routing_bias : 0.0);
  auto pass = [](double params, int n) { return params * 4 * (n - 1) / n; };
  const double gathers = l.zero == 3 ? 2.0 * kMicro : 1.0;
  const int n_e = l.dp / l.ep;
  double dp_rs = kMicro * pass(dense, l.dp), dp_ag = gathers * pass(dense, l.dp);
  double edp_rs = kMicro * pass(local.expert, n_e), edp_ag = gathers * pass(local.expert, n_e);
  if (l.ep == 1) dp_rs += edp_rs, dp_ag += edp_ag, edp_rs = edp_ag = 0;
  ASSERT_GT(local.routing_bias, 0);
  for (const auto& m : read_metrics(run)) {
    const auto& c = m["comm"];
    EXPECT_EQ(c["dp"]["reduce_scatter"].get<double>(), dp_rs) << m.dump();
    EXPECT_EQ(c["dp"]["all_gather"].get<double>(), dp_ag) << m.dump();
    if (edp_rs == 0) {
      EXPECT_FALSE(c.contains("edp")) << m.dump();
      continue;
    }
    EXPECT_EQ(c["edp"]["reduce_scatter"].get<double>(), edp_rs) << m.dump();
    EXPECT_EQ(c["edp"]["all_gather"].get<double>(), edp_ag) << m.dump();
  }
}

TEST_P(ExpertParallel, SameRunModelStatesAndAllToAllBytes) {
  const Layout l = GetParam();
  const std::string ref = shared_run(kEnv + flags());
  const std::string run = fresh_dir("moe_" + l.name);
  const std::string layout =
      " --set parallel.dp=" + std::to_string(l.dp) + " --set parallel.ep=" + std::to_string(l.ep) +
      " --set parallel.zero=" + std::to_string(l.zero) + " --set parallel.pp=" +
      std::to_string(l.pp) + " --set parallel.schedule=" + l.schedule;
  const auto r = run_trillion(kEnv + "launch -n " + std::to_string(l.dp * l.pp) + " -- " +
                              flags() + " --run-dir " + run + layout);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto cmp = run_trillion("compare " + ref + " " + run + " --tol 1e-5");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;

  // Model states per rank: plan/'s MoE parameters of the rank's stages, fp32, ZeRO over dp for
  // dense tensors and over the dp / ep ranks holding the same experts for routed ones.
  const ModelConfig mc = load_run_config(config_path("moe-tiny.toml"), {}).model;
  plan::Layout pl;
  pl.dp = l.dp, pl.ep = l.ep, pl.pp = l.pp, pl.zero = l.zero;
  pl.schedule = schedule::parse_schedule_kind(l.schedule);
  pl.chunks = l.schedule == "dualpipe" ? 2 : 1;
  const plan::PipelineShape shape = plan::pipeline_shape(mc.spec(), pl);
  const auto summary = read_json(run + "/summary.json");
  ASSERT_EQ(summary["memory_per_rank"].size(), static_cast<size_t>(l.dp * l.pp));
  for (int p = 0; p < l.pp; ++p) {
    const plan::LocalParams local = plan::params_of_rank(mc.spec(), pl, shape, p);
    const plan::ModelStates states =
        plan::rank_model_states(local, l.zero, l.dp, l.dp / l.ep, 4, 4, 8);
    for (int d = 0; d < l.dp; ++d) {
      const auto& rank = summary["memory_per_rank"][p * l.dp + d]["current"];
      EXPECT_EQ(rank["parameters"].get<double>(), states.parameters) << "pp " << p << " dp " << d;
      EXPECT_EQ(rank["gradients"].get<double>(), states.gradients) << "pp " << p << " dp " << d;
      EXPECT_EQ(rank["optimizer"].get<double>(), states.optimizer) << "pp " << p << " dp " << d;
    }
  }
  if (l.zero >= 2 && l.pp == 1) expect_zero_group_bytes(l, mc, run);

  // Rank 0's all-to-all bytes: every row it routes to another rank goes out twice (dispatch
  // forward, output gradient backward) and every row routed to it comes back twice (combine
  // forward, input gradient backward), C fp32 values each; each exchange first sends its
  // E/ep counts (f64) to each of the ep - 1 peers.
  const int64_t rows_per_micro = kBatch / l.dp * kSeq * kTopK;  // dropless: tokens x top-k
  for (const auto& m : read_metrics(run)) {
    if (l.ep == 1) break;  // no all-to-all
    const auto& rows = m["moe_rows"];
    const int64_t out = rows["out"], in = rows["in"], local = rows["local"],
                  exchanges = rows["exchanges"];
    EXPECT_GT(exchanges, 0);
    EXPECT_EQ(out + local, exchanges * rows_per_micro) << m.dump();
    const int64_t counts = exchanges * (l.ep - 1) * (kExperts / l.ep) * 8;
    EXPECT_EQ(m["comm"]["ep"]["all_to_all"].get<int64_t>(),
              2 * (out + in) * kWidth * 4 + counts)
        << m.dump();
    EXPECT_EQ(m["moe_dropped_tokens"].get<int64_t>(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ExpertParallel,
    ::testing::Values(
        Layout{2, 2, 0, 1, "1f1b", "dp2_ep2"}, Layout{4, 4, 1, 1, "1f1b", "dp4_ep4_zero1"},
        Layout{4, 2, 1, 1, "1f1b", "dp4_ep2_zero1"},
        Layout{2, 2, 1, 2, "zb-h1", "dp2_ep2_zero1_pp2_zbh1"},
        Layout{2, 2, 0, 2, "dualpipe", "dp2_ep2_pp2_dualpipe"},
        Layout{2, 1, 2, 1, "1f1b", "dp2_zero2"}, Layout{2, 2, 2, 1, "1f1b", "dp2_ep2_zero2"},
        Layout{2, 2, 3, 1, "1f1b", "dp2_ep2_zero3"}, Layout{2, 1, 3, 1, "1f1b", "dp2_zero3"},
        Layout{4, 2, 2, 1, "1f1b", "dp4_ep2_zero2"}, Layout{4, 2, 3, 1, "1f1b", "dp4_ep2_zero3"},
        Layout{2, 2, 3, 2, "dualpipe", "dp2_ep2_zero3_pp2_dualpipe"}),
    [](const auto& info) { return info.param.name; });

TEST(ExpertParallel, LayoutsThatCannotRunAreRefusedByName) {
  struct Case {
    int ranks;
    std::string sets, needle;
  };
  for (const Case& c : {
           Case{2, " --set parallel.dp=2 --set parallel.ep=4", "parallel.ep = 4 must divide"},
           Case{3, " --set parallel.dp=3 --set parallel.ep=3 --set train.micro_batch=6",
                "model.n_routed_experts = 8"},
           Case{2, " --set parallel.dp=2 --set parallel.ep=2 --set diloco.islands=2",
                "diloco with parallel.ep = 2"},
       }) {
    const auto r = run_trillion(kEnv + "launch -n " + std::to_string(c.ranks) + " -- " + flags() +
                                " --run-dir " + fresh_dir("moe_refused") + c.sets);
    EXPECT_EQ(r.exit_code, 2) << c.sets << "\n" << r.output;
    EXPECT_NE(r.output.find(c.needle), std::string::npos) << c.sets << "\n" << r.output;
  }
}

TEST(ExpertParallel, CheckpointsReshardAcrossEp) {
  const std::string ref = shared_run(kEnv + flags());
  struct Hop {
    int ep, zero;
  };
  // ep 2 <-> 1, and ZeRO-3 (expert shards over edp, routing biases whole) <-> ZeRO-2 / ZeRO-1.
  for (const auto& [first, second] :
       {std::pair{Hop{2, 0}, Hop{1, 0}}, std::pair{Hop{1, 0}, Hop{2, 0}},
        std::pair{Hop{2, 3}, Hop{1, 2}}, std::pair{Hop{1, 1}, Hop{2, 3}}}) {
    const std::string run = fresh_dir("moe_reshard");
    const std::string base = kEnv + "launch -n 2 -- " + flags() +
                             " --run-dir " + run +
                             " --set train.checkpoint_every=2 --set parallel.dp=2";
    auto at = [](const Hop& h) {
      return " --set parallel.ep=" + std::to_string(h.ep) +
             " --set parallel.zero=" + std::to_string(h.zero);
    };
    auto r = run_trillion(base + " --stop-after 2" + at(first));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = run_trillion(base + " --resume" + at(second));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto cmp = run_trillion("compare " + ref + " " + run + " --tol 1e-5");
    EXPECT_EQ(cmp.exit_code, 0) << at(first) << " -> " << at(second) << "\n" << cmp.output;
  }
}

// Max/mean expert load per step (worst MoE layer) of a 60-step run on a Markov corpus of
// sharpness 16 (most of each row's probability on a few successors: few distinct contexts).
std::vector<double> load_ratios(const std::string& router_sets, const std::string& name) {
  const std::string run = fresh_dir("moe_balance_" + name);
  const auto r = run_trillion(
      kEnv + "train " + config_path("moe-tiny.toml") + " --quiet --run-dir " + run +
      " --set train.steps=60 --set train.micro_batch=16 --set train.grad_accum=4"
      " --set train.log_every=1 --set data.source=markov --set data.sharpness=16"
      " --set model.balance_loss_alpha=0" +
      router_sets);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<double> ratios;
  for (const auto& m : read_metrics(run)) ratios.push_back(m["moe_max_load_ratio"].get<double>());
  EXPECT_EQ(ratios.size(), 60u);
  return ratios;
}

double mean_of_steps(const std::vector<double>& v, size_t first, size_t last) {
  double s = 0;
  for (size_t i = first - 1; i < last; ++i) s += v[i];
  return s / static_cast<double>(last - first + 1);
}

TEST(MoeBalance, SoftmaxWithoutAuxCollapsesBiasRoutingStaysBalanced) {
  const auto softmax = load_ratios(" --set model.router=softmax_aux", "softmax");
  const auto bias = load_ratios(
      " --set model.router=sigmoid_bias --set model.bias_update_rate=0.002", "sigmoid_bias");
  ASSERT_EQ(softmax.size(), 60u);
  ASSERT_EQ(bias.size(), 60u);
  // Same initial routing (same seed and router weights): the difference is the dynamics.
  EXPECT_DOUBLE_EQ(softmax[0], bias[0]);
  // Measured (steps 41-60): softmax without aux 2.56, bias 1.16 (its max 1.30).
  EXPECT_GE(mean_of_steps(softmax, 41, 60), 2.0);
  EXPECT_LE(mean_of_steps(bias, 41, 60), 1.3);
}

}  // namespace
}  // namespace trillion
