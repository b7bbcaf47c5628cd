// Context parallelism of a MoE model under `trillion launch`: configs/moe-tiny.toml (1 dense + 2
// MoE layers, 8 routed experts top-2 + 1 shared, sigmoid routing with the bias and 4 groups of 2
// experts of which 2 are kept (n_group / topk_group), dropless) at cp 2
// (zigzag and contiguous), cp 2 x ep 2 and dp 2 x cp 2 x ep 2 with ZeRO-1 and ZeRO-3 trains the
// one-process run of the same config (ONE shared reference): losses and final weights within
// 1e-5 (`trillion compare`). The balance loss's alpha is raised to 0.05 so that its gradient
// (whose f is summed over the cp group) moves the weights far beyond the tolerance; the logged
// balance loss, per-layer load ratios and bias norm equal the one-process values, so the
// routing-bias loads are the whole step's (summed over dp x cp). Rank 0's bytes over the cp
// group are the ring's K/V blocks plus one all-reduce of the f counts (B x E f64) per MoE layer
// and micro-batch; its routed rows are its T/cp tokens x top-k. Every cp rank holds exactly
// 1/cp of the one-process run's activation bytes (every kept MoE tensor is per token; under ep
// the ranks' bytes add up to it), and exactly plan/'s model-state bytes (ZeRO over dp x cp for
// dense tensors, over dp x cp / ep for experts; ZeRO-3 keeps the routing biases whole).
#include <gtest/gtest.h>

#include "../train/cli_util.h"
#include "plan/context_ring.h"
#include "plan/layout.h"
#include "plan/memory.h"
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

// moe-tiny: 4 sequences of 32 tokens per micro-batch; 2 MoE layers of 8 experts, top-2; 2 layers
// of attention with 2 KV heads of dimension 8.
constexpr int kMicro = 2, kBatch = 4, kSeq = 32, kLayers = 3, kMoeLayers = 2, kExperts = 8,
              kTopK = 2, kKv = 2, kHeadDim = 8;

std::string flags() {
  return "train " + config_path("moe-tiny.toml") +
         " --quiet --set train.steps=2 --set train.log_every=1 --set train.grad_accum=" +
         std::to_string(kMicro) + " --set model.balance_loss_alpha=0.05" +
         // Group-limited routing (4 groups of 2 experts, 2 kept): groups by expert index.
         " --set model.n_group=4 --set model.topk_group=2";
}

struct Layout {
  int cp;
  std::string split;
  int dp = 1, ep = 1, zero = 0;
  std::string name;
};
void PrintTo(const Layout& l, std::ostream* os) {
  *os << l.name;
}

class ContextParallelMoe : public ::testing::TestWithParam<Layout> {};

TEST_P(ContextParallelMoe, TrainsTheOneProcessRun) {
  const Layout l = GetParam();
  const std::string ref = shared_run(kEnv + flags());
  const std::string run = fresh_dir("context_moe_" + l.name);
  const int world = l.dp * l.cp;
  const auto r = run_trillion(
      kEnv + "launch -n " + std::to_string(world) + " -- " + flags() + " --run-dir " + run +
      " --set parallel.cp=" + std::to_string(l.cp) + " --set parallel.cp_split=" + l.split +
      " --set parallel.dp=" + std::to_string(l.dp) + " --set parallel.ep=" + std::to_string(l.ep) +
      " --set parallel.zero=" + std::to_string(l.zero));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto cmp = run_trillion("compare " + ref + " " + run + " --tol 1e-5");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
  EXPECT_TRUE(testing::has(cmp.output, "MATCH")) << cmp.output;

  const auto ref_lines = read_metrics(ref), run_lines = read_metrics(run);
  ASSERT_EQ(run_lines.size(), 2u);
  ASSERT_EQ(ref_lines.size(), run_lines.size());
  const int64_t local_batch = kBatch / l.dp, local_seq = kSeq / l.cp;
  const uint64_t kv_block = static_cast<uint64_t>(local_batch) * local_seq * 2 * kKv * kHeadDim * 4;
  // The f counts' all-reduce: B x E f64 per MoE layer and micro-batch, 2 (cp-1)/cp of it sent.
  const double f_bytes = static_cast<double>(local_batch * kExperts * 8);
  const double cp_bytes =
      kMicro * (kLayers * static_cast<double>(plan::context_ring_bytes(l.cp, kv_block).total()) +
                kMoeLayers * 2.0 * (l.cp - 1) / l.cp * f_bytes);
  for (size_t i = 0; i < run_lines.size(); ++i) {
    const auto &want = ref_lines[i], &got = run_lines[i];
    const double balance = want["moe_balance_loss"].get<double>();
    EXPECT_GT(balance, 0.0);
    EXPECT_NEAR(got["moe_balance_loss"].get<double>(), balance, 1e-6 * balance) << "step " << i;
    EXPECT_EQ(got["moe_layer_load_ratio"], want["moe_layer_load_ratio"]) << "step " << i;
    const double bias = want["moe_bias_norm"].get<double>();
    EXPECT_GT(bias, 0.0);
    EXPECT_NEAR(got["moe_bias_norm"].get<double>(), bias, 1e-6 * bias) << "step " << i;
    EXPECT_EQ(
        got["comm"]["cp"]["send"].get<double>() + got["comm"]["cp"]["all_reduce"].get<double>(),
        cp_bytes)
        << got.dump();
    if (l.ep > 1) {  // dropless: every token of this rank's T/cp rows goes to top-k experts
      const auto& rows = got["moe_rows"];
      EXPECT_EQ(rows["out"].get<int64_t>() + rows["local"].get<int64_t>(),
                rows["exchanges"].get<int64_t>() * local_batch * local_seq * kTopK)
          << got.dump();
      EXPECT_EQ(rows["exchanges"].get<int64_t>(), kMicro * kMoeLayers);
    }
  }

  // Activations: every kept tensor of the model (attention, router scores and gates, shared
  // experts) is per token row, and so are the expert rows of the last forward (the routed
  // assignments of its tokens): without ep each rank holds the one-process run's bytes / (dp cp).
  // Under ep a rank computes the rows routed to its experts, which depends on the routing, but
  // every row is held by exactly one rank: the ranks' bytes add up to the one-process bytes.
  const auto ref_summary = read_json(ref + "/summary.json");
  const auto summary = read_json(run + "/summary.json");
  const int64_t one_process =
      ref_summary["memory_per_rank"][0]["current"]["activations"].get<int64_t>();
  ASSERT_EQ(one_process % world, 0);
  int64_t total = 0;
  for (int rank = 0; rank < world; ++rank) {
    const int64_t held = summary["memory_per_rank"][rank]["current"]["activations"].get<int64_t>();
    total += held;
    if (l.ep == 1) {
      EXPECT_EQ(held, one_process / world) << "rank " << rank;
    }
  }
  EXPECT_EQ(total, one_process);

  // Model states per rank: plan/'s parameters of the rank, fp32, ZeRO over dp x cp for dense
  // tensors and over the dp x cp / ep ranks holding the same experts for routed ones.
  const ModelConfig mc = load_run_config(config_path("moe-tiny.toml"), {}).model;
  plan::Layout pl;
  pl.dp = l.dp, pl.cp = l.cp, pl.ep = l.ep, pl.zero = l.zero;
  const plan::LocalParams local =
      plan::params_of_rank(mc.spec(), pl, plan::pipeline_shape(mc.spec(), pl), 0);
  const plan::ModelStates states =
      plan::rank_model_states(local, l.zero, world, world / l.ep, 4, 4, 8);
  for (int rank = 0; rank < world; ++rank) {
    const auto& m = summary["memory_per_rank"][rank]["current"];
    EXPECT_EQ(m["parameters"].get<double>(), states.parameters) << rank;
    EXPECT_EQ(m["gradients"].get<double>(), states.gradients) << rank;
    EXPECT_EQ(m["optimizer"].get<double>(), states.optimizer) << rank;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, ContextParallelMoe,
                         ::testing::Values(Layout{2, "zigzag", 1, 1, 0, "cp2_zigzag"},
                                           Layout{2, "contiguous", 1, 1, 0, "cp2_contiguous"},
                                           Layout{2, "zigzag", 1, 2, 0, "cp2_ep2"},
                                           Layout{2, "zigzag", 2, 2, 1, "dp2_cp2_ep2_zero1"},
                                           Layout{2, "zigzag", 2, 2, 3, "dp2_cp2_ep2_zero3"}),
                         [](const ::testing::TestParamInfo<Layout>& i) { return i.param.name; });

}  // namespace
}  // namespace trillion
