// MoE x tensor parallelism under `trillion launch`, against ONE shared one-process run of
// configs/moe-tiny.toml (1 dense + 2 MoE layers, 8 routed experts top-2 + 1 shared, sigmoid
// routing with the bias and 4 groups of 2 experts of which 2 are kept (n_group / topk_group),
// dropless; the balance loss's alpha raised to 0.05 so its gradient, whose
// f is summed over the tp ranks, moves the weights far beyond the tolerance):
// - parallel.expert_tp = 1 (the tp ranks hold whole experts; the ep group spans tp x ep) at
//   tp 2 (ep 1: experts over the 2 tp ranks) and tp 2 x dp 2 x ep 2 (over 4 ranks): losses and
//   final weights within 1e-5 (`trillion compare`); the logged balance loss, per-layer load ratios
//   and bias norm equal the one-process values (the router bias moves from the whole step's loads
//   on every rank);
// - every rank's parameter, gradient and optimizer bytes == plan/'s per-rank MoE parameters
//   (dense over tp, experts over ep x tp) through plan::zero_model_states, and its activation
//   bytes == plan::engine_activation_bytes with its tp split and expert layout, exactly;
// - rank 0's bytes per step, group by group: the ep all-to-all == 2 (R_out + R_in) C 4 + the
//   count exchanges over its tp x ep peers, its routed rows == its N/tp rows x top-k; over tp the
//   all-gathers and reduce-scatters of a dense run (the shared experts are a tp region like the
//   MLP, the routed rows take none), and the all-reduces == the loss's, the f counts' (B x E f64
//   per MoE layer and micro-batch), the replicated gradients' (norms, routers), the norm's and
//   the routing statistics' (L x E + 2 f64 per step); over ep, besides, the experts' part of the
//   gradient norm;
// - the same for parallel.expert_tp = tp (every expert split over tp along its width, the MoE
//   layer a tp region over the gathered rows, the all-to-all over ep among the ranks of one tp
//   coordinate) at tp 2 and tp 2 x dp 2 x ep 2: its routed rows are all N, its tp all-reduces
//   carry the gates' gradients (N x top-k f64 per MoE layer and micro-batch) instead of the f
//   counts and the routing statistics.
#include <gtest/gtest.h>

#include "../train/cli_util.h"
#include "plan/activation_memory.h"
#include "plan/layout.h"
#include "plan/memory.h"
#include "schedule/generators.h"
#include "schedule/simulator.h"
#include "train/run_config.h"

namespace trillion {
namespace {

using testing::config_path;
using testing::fresh_dir;
using testing::one_thread_per_rank;
using testing::read_json;
using testing::read_metrics;
using testing::run_trillion;
using testing::shared_run;

const std::string kEnv = one_thread_per_rank();

// moe-tiny: 4 sequences of 32 tokens per micro-batch, width 32, 3 layers (2 MoE) of 8 experts
// top-2, 1 shared expert of width 16, vocabulary 64.
constexpr int kMicro = 2, kBatch = 4, kSeq = 32, kWidth = 32, kLayers = 3, kMoeLayers = 2,
              kExperts = 8, kTopK = 2;

std::string flags() {
  return "train " + config_path("moe-tiny.toml") +
         " --quiet --set train.steps=2 --set train.log_every=1 --set train.grad_accum=" +
         std::to_string(kMicro) + " --set model.balance_loss_alpha=0.05" +
         // Group-limited routing (4 groups of 2 experts, 2 kept): groups by expert index.
         " --set model.n_group=4 --set model.topk_group=2";
}

double sent(const nlohmann::json& group, const char* kind) {
  return group.contains(kind) ? group[kind].get<double>() : 0.0;
}

struct Layout {
  int tp, dp, ep, expert_tp;
  std::string name;
};
void PrintTo(const Layout& l, std::ostream* os) {
  *os << l.name;
}

class MoeTensorParallel : public ::testing::TestWithParam<Layout> {};

TEST_P(MoeTensorParallel, TrainsTheOneProcessRunWithTheFormulaBytes) {
  const Layout l = GetParam();
  const std::string ref = shared_run(kEnv + flags());
  const std::string run = fresh_dir("moe_tensor_" + l.name);
  const int world = l.tp * l.dp;
  const auto r = run_trillion(kEnv + "launch -n " + std::to_string(world) + " -- " + flags() +
                              " --run-dir " + run + " --set parallel.tp=" + std::to_string(l.tp) +
                              " --set parallel.dp=" + std::to_string(l.dp) +
                              " --set parallel.ep=" + std::to_string(l.ep) +
                              " --set parallel.expert_tp=" + std::to_string(l.expert_tp));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto cmp = run_trillion("compare " + ref + " " + run + " --tol 1e-5");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
  EXPECT_TRUE(testing::has(cmp.output, "MATCH")) << cmp.output;

  const auto ref_lines = read_metrics(ref), run_lines = read_metrics(run);
  ASSERT_EQ(run_lines.size(), 2u);
  ASSERT_EQ(ref_lines.size(), run_lines.size());
  // The experts' all-to-all group and the rows a rank routes: its N/tp SP rows over tp x ep
  // (expert_tp 1), or all N gathered rows over ep (expert_tp = tp).
  const bool whole = l.expert_tp == 1;
  const int group = whole ? l.tp * l.ep : l.ep;
  const double ring = (l.tp - 1.0) / l.tp;
  const int64_t B = kBatch / l.dp, N = B * kSeq, rows = whole ? N / l.tp : N;
  const double NC = static_cast<double>(N) * kWidth * 4;
  for (size_t i = 0; i < run_lines.size(); ++i) {
    const auto &want = ref_lines[i], &got = run_lines[i];
    const double balance = want["moe_balance_loss"].get<double>();
    EXPECT_GT(balance, 0.0);
    EXPECT_NEAR(got["moe_balance_loss"].get<double>(), balance, 1e-6 * balance) << "step " << i;
    EXPECT_EQ(got["moe_layer_load_ratio"], want["moe_layer_load_ratio"]) << "step " << i;
    const double bias = want["moe_bias_norm"].get<double>();
    EXPECT_GT(bias, 0.0);
    EXPECT_NEAR(got["moe_bias_norm"].get<double>(), bias, 1e-6 * bias) << "step " << i;

    // ep: every row routed to another rank goes out twice and comes back twice (C fp32 each);
    // each exchange first sends E/group counts (f64) to each of the group - 1 peers; the
    // experts' part of the gradient norm is one f64 summed over the group.
    const nlohmann::json ep = got["comm"].value("ep", nlohmann::json::object());
    if (group == 1) {
      EXPECT_FALSE(got.contains("moe_rows")) << got.dump();
      EXPECT_EQ(sent(ep, "all_to_all") + sent(ep, "all_reduce"), 0.0) << got.dump();
    } else {
      const auto& moe_rows = got["moe_rows"];
      const int64_t out = moe_rows["out"], in = moe_rows["in"], local = moe_rows["local"],
                    exchanges = moe_rows["exchanges"];
      EXPECT_EQ(exchanges, kMicro * kMoeLayers);
      EXPECT_EQ(out + local, exchanges * rows * kTopK) << got.dump();  // dropless
      const double counts = static_cast<double>(exchanges * (group - 1) * (kExperts / group) * 8);
      EXPECT_EQ(sent(ep, "all_to_all"), 2.0 * (out + in) * kWidth * 4 + counts) << got.dump();
      EXPECT_EQ(sent(ep, "all_reduce"), 2.0 * (group - 1) / group * 8) << got.dump();
    }

    // tp: 14 [N, C] tensors each way per micro-batch (the embedding, per layer the attention's
    // and the MLP's or MoE layer's input and output, the head), as a dense run.
    const auto& tp = got["comm"]["tp"];
    const double per_micro = 4.0 * kLayers + 2;
    EXPECT_EQ(sent(tp, "all_gather"), kMicro * per_micro * ring * NC) << got.dump();
    EXPECT_EQ(sent(tp, "reduce_scatter"), kMicro * per_micro * ring * NC) << got.dump();
    // All-reduces (ring: 2 (p-1)/p of the bytes), in f64: the loss (max, sum-exp, target
    // logit: 3 N per micro-batch), the norm (1) and the replicated gradients (2 norms per layer
    // + the final one, C each; per MoE layer the router [E, C] and its bias [E]); with whole
    // experts the f counts (B E per MoE layer and micro-batch) and the routing statistics
    // (L E + 2); with experts split over tp the gates' gradients (N top-k per MoE layer and
    // micro-batch: each expert's output is partial over tp) and, with ep > 1, the experts' part
    // of the norm once more (over ep, then tp).
    double reduced = kMicro * 3.0 * N + 1 + (2.0 * kLayers + 1) * kWidth +
                     kMoeLayers * (kExperts * kWidth + kExperts);
    if (whole) {
      reduced += kMicro * kMoeLayers * B * kExperts + (kLayers * kExperts + 2);
    } else {
      reduced += kMicro * kMoeLayers * N * kTopK + (l.ep > 1 ? 1 : 0);
    }
    EXPECT_EQ(sent(tp, "all_reduce"), 2 * ring * 8 * reduced) << got.dump();
  }

  // Model states per rank: plan/'s parameters of the rank (dense over tp, experts over ep x tp
  // in either layout), fp32, dense replicated over dp and experts over the dp / ep ranks
  // holding the same experts.
  const ModelConfig mc = load_run_config(config_path("moe-tiny.toml"), {}).model;
  plan::Layout pl;
  pl.tp = l.tp, pl.dp = l.dp, pl.ep = l.ep, pl.zero = 0;
  const plan::LocalParams held =
      plan::params_of_rank(mc.spec(), pl, plan::pipeline_shape(mc.spec(), pl), 0);
  const plan::ModelStates dense = plan::zero_model_states(held.dense, 0, l.dp, 4, 4, 8);
  const plan::ModelStates expert = plan::zero_model_states(held.expert, 0, l.dp / l.ep, 4, 4, 8);
  EXPECT_GT(expert.parameters, 0.0);
  // Activations per rank == plan/'s formula (the routed rows, freed after every backward and
  // after the closing evaluation, are not held): the one-process run's with tp = 1, and each
  // layout's with its tp split and expert layout.
  const int slots = schedule::inflight_slots(
      schedule::generate_schedule(schedule::ScheduleKind::k1F1B, 1, kMicro, 1), 0)[0];
  auto activations = [&](int64_t batch, plan::TensorSplit split) {
    return plan::engine_activation_bytes(mc.spec(), batch, kSeq, mc.activation_policy(), 4, 4,
                                         {0, kLayers, true}, slots, split)
        .total();
  };
  const auto ref_summary = read_json(ref + "/summary.json");
  EXPECT_EQ(ref_summary["memory_per_rank"][0]["current"]["activations"].get<int64_t>(),
            activations(kBatch, {}));
  const int64_t predicted = activations(B, {l.tp, true, 1, !whole});
  const auto summary = read_json(run + "/summary.json");
  ASSERT_EQ(summary["memory_per_rank"].size(), static_cast<size_t>(world));
  for (int rank = 0; rank < world; ++rank) {
    const auto& m = summary["memory_per_rank"][rank]["current"];
    EXPECT_EQ(m["parameters"].get<double>(), dense.parameters + expert.parameters) << rank;
    EXPECT_EQ(m["gradients"].get<double>(), dense.gradients + expert.gradients) << rank;
    EXPECT_EQ(m["optimizer"].get<double>(), dense.optimizer + expert.optimizer) << rank;
    EXPECT_EQ(m["activations"].get<int64_t>(), predicted) << rank;
    EXPECT_EQ(summary["memory_per_rank"][rank]["predicted"]["activations"].get<int64_t>(),
              predicted)
        << rank;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, MoeTensorParallel,
                         ::testing::Values(Layout{2, 1, 1, 1, "tp2_ep1"},
                                           Layout{2, 2, 2, 1, "tp2_dp2_ep2"},
                                           Layout{2, 1, 1, 2, "tp2_ep1_expert_tp2"},
                                           Layout{2, 2, 2, 2, "tp2_dp2_ep2_expert_tp2"}),
                         [](const auto& info) { return info.param.name; });

// Checkpoints hold the global layout (experts split in two dimensions are placed block by block):
// written at tp 2 x dp 2 x ep 2 with every expert split over tp, the run resumes with whole
// experts over tp x ep and continues the one-process run.
TEST(MoeTensorParallel, CheckpointsReshardBetweenTheExpertLayouts) {
  const std::string steps = " --set train.steps=4 --set checkpoint.interval=2";
  const std::string ref = shared_run(kEnv + flags() + steps);
  const std::string run = fresh_dir("moe_tensor_reshard");
  const std::string base = kEnv + "launch -n 4 -- " + flags() + steps + " --run-dir " + run +
                           " --set parallel.tp=2 --set parallel.dp=2 --set parallel.ep=2";
  auto r = run_trillion(base + " --stop-after 2 --set parallel.expert_tp=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_trillion(base + " --resume --set parallel.expert_tp=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_metrics(run).size(), 4u);
  const auto cmp = run_trillion("compare " + ref + " " + run + " --tol 1e-5");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
  EXPECT_TRUE(testing::has(cmp.output, "MATCH")) << cmp.output;
}

}  // namespace
}  // namespace trillion
