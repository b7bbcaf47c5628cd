// Full recompute of MoE layers (issue 36): a layer keeps only its output and reruns everything in
// the backward pass, the routing and the expert all-to-all included (model/moe.h Moe::recompute;
// the expert rows are freed after the forward and exchanged again). configs/moe-tiny.toml (1
// dense + 2 MoE layers, 8 experts top-2 + 1 shared, dropless), 3 steps of 4 micro-batches:
// - one process: the same losses, gradient norms and final weights as recompute = none (1e-6;
//   the rerun is bitwise the forward), fewer activation bytes, each equal to plan/'s (and with
//   every layer MoE, whose recompute buffer is a MoE layer's);
// - ep 2 at dp 2 and dp 4: the one-process full-recompute run (1e-5), every rank's activation
//   bytes plan/'s, and rank 0's all-to-all bytes 3 (R_out + R_in) C 4 per step for the rows of
//   one forward (forward, its rerun and backward) plus one count exchange per routing, i.e.
//   exactly 1.5 x the data bytes and 2 x the exchanges of the same layout without recompute, as
//   plan/'s step model counts one more exchange pair per MoE layer;
// - tp > 1 and schedules that defer W passes are refused with the reason.
#include <gtest/gtest.h>

#include "../train/cli_util.h"
#include "core/error.h"
#include "train/run_config.h"
#include "train/step_layout.h"

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
constexpr int kWidth = 32, kExperts = 8;

std::string flags() {
  return "train " + config_path("moe-tiny.toml") +
         " --quiet --set train.steps=3 --set train.log_every=1 --set train.grad_accum=4";
}
const std::string kFull = " --set model.recompute=full";

// Every rank's stored activations are plan/'s (the engine's memory plan reads plan/'s formula).
int64_t expect_planned_activations(const std::string& run) {
  const auto summary = read_json(run + "/summary.json");
  int64_t first = -1;
  for (const auto& rank : summary["memory_per_rank"]) {
    const int64_t now = rank["current"]["activations"].get<int64_t>();
    EXPECT_EQ(now, rank["predicted"]["activations"].get<int64_t>()) << run << " " << rank;
    if (first < 0) first = now;
  }
  return first;
}

TEST(MoeRecompute, FullEqualsNoneInOneProcess) {
  const std::string none = shared_run(kEnv + flags());
  const std::string full = shared_run(kEnv + flags() + kFull);
  const auto cmp = run_trillion("compare " + none + " " + full + " --tol 1e-6");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
  const auto a = read_metrics(none), b = read_metrics(full);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double g = a[i]["grad_norm"].get<double>();
    EXPECT_GT(g, 0);
    EXPECT_NEAR(b[i]["grad_norm"].get<double>(), g, 1e-6 * g) << "step " << i + 1;
  }
  const int64_t kept_none = expect_planned_activations(none);
  const int64_t kept_full = expect_planned_activations(full);
  EXPECT_LT(kept_full, kept_none);
  // Every layer MoE: the shared buffer is sized for a MoE layer, not a dense one.
  const std::string all_moe = shared_run(kEnv + flags() + kFull + " --set model.n_dense_layers=0");
  ASSERT_EQ(read_metrics(all_moe).size(), 3u);
  expect_planned_activations(all_moe);
  std::printf("[moe recompute] activations: none %lld B, full %lld B\n",
              static_cast<long long>(kept_none), static_cast<long long>(kept_full));
}

struct Totals {
  int64_t data = 0, counts = 0, exchanges = 0;
};

// Rank 0's all-to-all bytes of every step, split into row data and count exchanges.
Totals all_to_all(const std::string& run, int ep, double passes_per_routing) {
  Totals t;
  for (const auto& m : read_metrics(run)) {
    const auto& rows = m["moe_rows"];
    const int64_t out = rows["out"], in = rows["in"], exchanges = rows["exchanges"];
    const int64_t counts = exchanges * (ep - 1) * (kExperts / ep) * 8;
    const int64_t bytes = m["comm"]["ep"]["all_to_all"].get<int64_t>();
    // Each routing's rows go out and come back once per pass that moves them.
    EXPECT_EQ(static_cast<double>(bytes - counts),
              passes_per_routing * static_cast<double>((out + in) * kWidth * 4))
        << m.dump();
    t.data += bytes - counts, t.counts += counts, t.exchanges += exchanges;
  }
  return t;
}

TEST(MoeRecompute, ExpertParallelFullRecomputeTrainsTheOneProcessRun) {
  const std::string ref = shared_run(kEnv + flags() + kFull);
  for (int dp : {2, 4}) {
    const std::string layout =
        " --set parallel.dp=" + std::to_string(dp) + " --set parallel.ep=2 --set parallel.zero=1";
    const std::string full = fresh_dir("moe_full_dp" + std::to_string(dp) + "_ep2");
    auto r = run_trillion(kEnv + "launch -n " + std::to_string(dp) + " -- " + flags() + kFull +
                          layout + " --run-dir " + full);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto cmp = run_trillion("compare " + ref + " " + full + " --tol 1e-5");
    EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
    expect_planned_activations(full);
    const std::string none = fresh_dir("moe_none_dp" + std::to_string(dp) + "_ep2");
    r = run_trillion(kEnv + "launch -n " + std::to_string(dp) + " -- " + flags() + layout +
                     " --run-dir " + none);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // Without recompute: forward and backward (2 passes per routing); with it the forward, its
    // rerun and the backward over two routings of the same rows (3 passes / 2 routings).
    const Totals n = all_to_all(none, 2, 2.0), f = all_to_all(full, 2, 1.5);
    EXPECT_EQ(f.exchanges, 2 * n.exchanges);
    EXPECT_EQ(2 * f.data, 3 * n.data);
    EXPECT_EQ(f.counts, 2 * n.counts);
    std::printf(
        "[moe recompute] dp %d ep 2: all-to-all data %lld B (none %lld B), exchanges %lld "
        "(none %lld)\n",
        dp, static_cast<long long>(f.data), static_cast<long long>(n.data),
        static_cast<long long>(f.exchanges), static_cast<long long>(n.exchanges));
  }
}

TEST(MoeRecompute, LayoutsThatCannotRerunTheLayerAreRefusedWithTheReason) {
  auto message = [](const std::vector<std::string>& set) {
    try {
      std::vector<std::string> all = {"model.recompute=full"};
      all.insert(all.end(), set.begin(), set.end());
      checked_layout(load_run_config(config_path("moe-tiny.toml"), all));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message({"parallel.dp=2", "parallel.ep=2"}), "accepted");
  EXPECT_EQ(message({"parallel.pp=2", "parallel.schedule=1f1b"}), "accepted");
  std::string m = message({"parallel.tp=2", "parallel.expert_tp=2"});
  EXPECT_NE(m.find("model.recompute = full with MoE layers and parallel.tp = 2: the tp MoE paths "
                   "write the layer's output"),
            std::string::npos)
      << m;
  m = message({"parallel.pp=2", "parallel.schedule=zb-h1"});
  EXPECT_NE(m.find("parallel.schedule = zb-h1: a deferred W pass would rerun the MoE layer's "
                   "routing and expert exchange a third time"),
            std::string::npos)
      << m;
}

}  // namespace
}  // namespace trillion
