// Multi-token prediction under the layouts that run it, against the one-process run of the same
// config (configs/mtp-tiny.toml, 3 steps, lambda 0.3 for 2 steps then 0.1): dp 2 with ZeRO-3, pp 2
// under DualPipe (the modules with the head on the last stage, the shared embedding's gradient
// summed over the two model copies), pp 2 under 1F1B and zb-h1 (the head's rank reads a copy of
// the embedding: parallel/pipeline/tied_embedding.h) and tp 2 without and with sequence
// parallelism (under SP the modules hold the rank's N/tp rows, model/mtp.h).
// Losses and final weights within 1e-5 (`trillion compare`), each step's mtp_loss_1 within 1e-5,
// each rank's activation bytes are plan/'s, and under 1F1B and zb-h1 each rank's parameter bytes
// are plan/'s (the head's rank's copy too);
// MLA with MTP at dp 2 (ZeRO-1, ZeRO-3) and pp 2 (1F1B, ZB-H1, DualPipe) likewise; the copy under
// ZeRO-2/3: tied_zero_test.cpp.
#include <gtest/gtest.h>

#include "../train/cli_util.h"
#include "core/error.h"
#include "plan/memory.h"
#include "schedule/action.h"
#include "train/run_config.h"
#include "train/step_layout.h"

namespace trillion {
namespace {

using testing::config_path;
using testing::fresh_dir;
using testing::one_thread_per_rank;
using testing::read_metrics;
using testing::run_trillion;
using testing::shared_run;

const std::string kEnv = one_thread_per_rank();

std::string flags() {
  return "train " + config_path("mtp-tiny.toml") +
         " --quiet --set train.steps=3 --set train.grad_accum=4 --set train.log_every=1"
         " --set model.mtp_loss_weight_switch_step=2";
}

void expect_same_run(const std::string& ref, const std::string& run) {
  const auto cmp = run_trillion("compare " + ref + " " + run + " --tol 1e-5");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
  const auto a = read_metrics(ref), b = read_metrics(run);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double want = a[i]["mtp_loss_1"].get<double>();
    EXPECT_GT(want, 1.0);
    EXPECT_NEAR(b[i]["mtp_loss_1"].get<double>(), want, 1e-5 * want) << "step " << i + 1;
    EXPECT_EQ(b[i]["mtp_loss_weight"].get<double>(), i + 1 < 3 ? 0.3 : 0.1) << "step " << i + 1;
  }
  // Each rank's stored activations, the modules' on the head's rank included, are plan/'s.
  const auto summary = testing::read_json(run + "/summary.json");
  for (const auto& rank : summary["memory_per_rank"]) {
    EXPECT_EQ(rank["current"]["activations"].get<int64_t>(),
              rank["predicted"]["activations"].get<int64_t>())
        << run << ", rank " << rank["rank"];
  }
}

TEST(MtpLayout, Dp2Zero3PipelinesAndTp2MatchOneProcess) {
  const std::string ref = shared_run(kEnv + flags());
  const std::string dp = fresh_dir("h33mtp_dp2_zero3");
  auto r = run_trillion(kEnv + "launch -n 2 -- " + flags() + " --run-dir " + dp +
                        " --set parallel.dp=2 --set parallel.zero=3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_same_run(ref, dp);
  const std::string pp = fresh_dir("h33mtp_pp2_dualpipe");
  r = run_trillion(kEnv + "launch -n 2 -- " + flags() + " --run-dir " + pp +
                   " --set parallel.pp=2 --set parallel.schedule=dualpipe");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_same_run(ref, pp);
  for (const char* schedule : {"1f1b", "zb-h1"}) {
    const std::string copy = fresh_dir(std::string("h33mtp_pp2_") + schedule);
    r = run_trillion(kEnv + "launch -n 2 -- " + flags() + " --run-dir " + copy +
                     " --set parallel.pp=2 --set parallel.schedule=" + schedule);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    expect_same_run(ref, copy);
    // Each rank holds plan/'s params_of_rank: the head's rank counts the embedding's copy.
    const RunConfig config = load_run_config(config_path("mtp-tiny.toml"), {});
    plan::Layout pl;
    pl.pp = 2, pl.schedule = schedule::parse_schedule_kind(schedule);
    const plan::ModelSpec spec = config.model.spec();
    const plan::PipelineShape shape = plan::pipeline_shape(spec, pl);
    const auto summary = testing::read_json(copy + "/summary.json");
    for (int p = 0; p < 2; ++p) {
      EXPECT_EQ(summary["memory_per_rank"][p]["current"]["parameters"].get<double>(),
                4 * plan::params_of_rank(spec, pl, shape, p).dense)
          << schedule << ", pipeline rank " << p;
    }
  }
  // tp 2 without SP: the modules' blocks, embedding lookups and head run their tp shards.
  const std::string tp = fresh_dir("h33mtp_tp2");
  r = run_trillion(kEnv + "launch -n 2 -- " + flags() + " --run-dir " + tp +
                   " --set parallel.tp=2 --set parallel.sp=false");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_same_run(ref, tp);
  // tp 2 with SP: the modules' residual rows split over tp, their activations plan/'s.
  const std::string sp = fresh_dir("h36mtp_tp2_sp");
  r = run_trillion(kEnv + "launch -n 2 -- " + flags() + " --run-dir " + sp +
                   " --set parallel.tp=2 --set parallel.sp=true");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_same_run(ref, sp);
  // cp 2: tests/parallel/deepseek_layout_test.cpp (deepseek-tiny, zigzag and contiguous).
}

// Dense multi-head latent attention with an MTP module (DeepSeek-V3's attention and objective on
// the tiny scale): dp 2 under ZeRO-1 and ZeRO-3, and pp 2 under 1F1B, ZB-H1 and DualPipe (the
// module with the head on the last stage) train the one-process run, with plan/'s activation
// bytes on every rank.
TEST(MtpLayout, MlaWithMtpTrainsTheOneProcessRunAtDpAndPp) {
  const std::string mla =
      " --set model.attention=mla --set model.n_kv_heads=4 --set model.q_lora_rank=8"
      " --set model.kv_lora_rank=8 --set model.qk_nope_head_dim=8 --set model.qk_rope_head_dim=4"
      " --set model.v_head_dim=6";
  const std::string ref = shared_run(kEnv + flags() + mla);
  for (const std::string layout :
       {"parallel.dp=2 --set parallel.zero=1", "parallel.dp=2 --set parallel.zero=3",
        "parallel.pp=2 --set parallel.schedule=1f1b", "parallel.pp=2 --set parallel.schedule=zb-h1",
        "parallel.pp=2 --set parallel.schedule=dualpipe"}) {
    std::string name = "h33mla_mtp_" + layout;
    for (char& ch : name) {
      if (ch == ' ' || ch == '=' || ch == '.') ch = '_';
    }
    const std::string run = fresh_dir(name.substr(0, 60));
    const auto r = run_trillion(kEnv + "launch -n 2 -- " + flags() + mla + " --run-dir " + run +
                                " --set " + layout);
    ASSERT_EQ(r.exit_code, 0) << layout << ": " << r.output;
    expect_same_run(ref, run);
  }
}

TEST(MtpLayout, LayoutsOnceRefusedAreAccepted) {
  auto message = [](const std::vector<std::string>& set) {
    try {
      checked_layout(load_run_config(config_path("mtp-tiny.toml"), set));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  // The head's copy under ZeRO-2/3 runs shard-wise (tests/parallel/tied_zero_test.cpp).
  EXPECT_EQ(message({"parallel.pp=2", "parallel.dp=2", "parallel.zero=2"}), "accepted");
  EXPECT_EQ(message({"parallel.pp=2", "parallel.schedule=1f1b"}), "accepted");
  EXPECT_EQ(message({"parallel.tp=2"}), "accepted");  // with sequence parallelism, the default
  EXPECT_EQ(message({"parallel.tp=2", "parallel.sp=false"}), "accepted");
  EXPECT_EQ(message({"parallel.cp=2"}), "accepted");
  EXPECT_EQ(message({"parallel.pp=2", "parallel.schedule=dualpipe", "train.grad_accum=4"}),
            "accepted");
}

}  // namespace
}  // namespace trillion
