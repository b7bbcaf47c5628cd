// Scale-out in whole runs under `trillion launch`, on configs/tiny.toml (P = 22,688 parameters):
// - DiLoCo with H = 1, outer lr 1 and no outer momentum, inner SGD with momentum, is synchronous
//   data parallelism: the global model's validation loss at every step within 1e-5 relative of
//   the one-process run, final weights within 1e-5, for islands of 1 and 2 ranks, ZeRO 0/1/3 and
//   a pipeline; the outer state's optimizer bytes and the bytes between islands exact;
// - DiLoCo with H = 20 sends exactly 1/20 of synchronous DP's gradient bytes between the two
//   islands (counters; also under the emulated 1,000 km link);
// - Streaming DiLoCo (2 fragments, overlapped, bf16 or fp4 exchange) resumes bitwise from a
//   checkpoint taken while an exchange is in flight (weights, losses, validation losses and the
//   noise scale's averages), and sends exactly the quantised bytes;
// - the all-reduce algorithms and the link emulator train the same run as one process;
// - the gradient noise scale is the same whether its estimates are dp ranks or micro-batches.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "../train/cli_util.h"
#include "plan/memory.h"

namespace trillion {
namespace {

using testing::config_path;
using testing::fresh_dir;
using testing::read_json;
using testing::run_trillion;
using testing::shared_run;
using testing::one_thread_per_rank;
using testing::read_metrics;

constexpr int64_t kParams = 22688;  // configs/tiny.toml
// Strided over 2 fragments: layer 0 with the embedding, layer 1 with the head (norm + lm_head).
constexpr int64_t kFragment0 = 2048 + 9280, kFragment1 = 9280 + 32 + 2048;
const std::string kEnv = one_thread_per_rank();

double bytes(const nlohmann::json& line, const char* group, const char* kind) {
  const auto& c = line["comm"];
  return c.contains(group) && c[group].contains(kind) ? c[group][kind].get<double>() : 0.0;
}

std::string tiny(const std::string& sets) {
  return "train " + config_path("tiny.toml") + " --quiet --set parallel.bucket_mb=0.02" + sets;
}

std::string launch(int n, const std::string& args, const std::string& dir) {
  return kEnv + "launch -n " + std::to_string(n) + " -- " + args + " --run-dir " + dir;
}

// --- DiLoCo H = 1 == synchronous DP ----------------------------------------------------------

struct IslandLayout {
  int dp, zero, pp;
  std::string name;
  int cp = 1;  // > 1: each island is a dp x cp plane (ring attention inside, ZeRO over both)
};
void PrintTo(const IslandLayout& l, std::ostream* os) {
  *os << l.name;
}
class DilocoParity : public ::testing::TestWithParam<IslandLayout> {};

TEST_P(DilocoParity, OneInnerStepUnitOuterLrNoMomentumIsSynchronousDp) {
  const IslandLayout l = GetParam();
  // SGD's update is linear in the gradients (optim/sgd.h), so the islands' mean update is the
  // update of the mean gradient; clipping per island would not be.
  const std::string common = tiny(
      " --set train.steps=6 --set train.eval_every=1 --set optim.name=sgd --set optim.lr=0.3 "
      "--set optim.grad_clip=0 --set train.grad_accum=" +
      std::to_string(l.pp));
  const std::string ref = shared_run(kEnv + common);
  const std::string run = fresh_dir("diloco_h1_" + l.name);
  const int islands = 2, per_island = l.dp / islands;
  const auto r = run_trillion(
      launch(l.dp * l.pp * l.cp,
             common + " --set parallel.dp=" + std::to_string(l.dp) + " --set parallel.pp=" +
                 std::to_string(l.pp) + " --set parallel.cp=" + std::to_string(l.cp) +
                 " --set parallel.zero=" + std::to_string(l.zero) +
                 " --set diloco.islands=2 --set diloco.inner_steps=1 --set diloco.outer_lr=1 "
                 "--set diloco.outer_momentum=0",
             run));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto cmp = run_trillion("compare " + ref + " " + run + " --metric val_loss --tol 1e-5");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
  const auto ma = read_metrics(ref), mb = read_metrics(run);
  ASSERT_EQ(mb.size(), 6u);
  for (size_t s = 0; s < ma.size(); ++s) {
    const double a = ma[s]["val_loss"], b = mb[s]["val_loss"];
    EXPECT_LE(std::abs(a - b), 1e-5 * a) << "step " << s + 1;
    EXPECT_EQ(mb[s]["tokens"], ma[s]["tokens"]);  // the islands together read the same batch
    EXPECT_EQ(mb[s]["diloco"]["sent"], nlohmann::json::array({0}));
    EXPECT_EQ(mb[s]["diloco"]["merged"], nlohmann::json::array({0}));
    // fp32 all-reduce of the elements this rank updates over 2 islands, 2 (2-1)/2 x 4 bytes each:
    // its ZeRO shard of the island's dp x cp plane (the buckets are even: P / (per_island x cp)
    // exactly; without ZeRO all of P), or with a pipeline the first stage's embedding and layer 0.
    const int64_t held = l.pp > 1     ? kFragment0
                         : l.zero > 0 ? kParams / (per_island * l.cp)
                                      : kParams;
    EXPECT_EQ(bytes(mb[s], "islands", "all_reduce"), held * 4.0) << "step " << s + 1;
  }
  // Optimizer memory: SGD's momentum + the outer model + the outer momentum, 4 bytes each per
  // element this rank updates (its ZeRO shard of the island).
  if (l.pp == 1) {
    const plan::ModelStates f =
        plan::zero_model_states(static_cast<double>(kParams), l.zero, per_island * l.cp, 4, 4, 12);
    for (const auto& rank : read_json(run + "/summary.json")["memory_per_rank"]) {
      EXPECT_EQ(rank["current"]["optimizer"].get<double>(), f.optimizer) << rank;
    }
  }
  const auto summary = read_json(run + "/summary.json");
  EXPECT_EQ(summary["diloco"]["exchanges"], 6);
  EXPECT_NEAR(summary["final_val_loss"].get<double>(),
              read_json(ref + "/summary.json")["final_val_loss"].get<double>(), 1e-5 * 4.2);
}

INSTANTIATE_TEST_SUITE_P(Islands, DilocoParity,
                         ::testing::Values(IslandLayout{2, 0, 1, "dp2_zero0"},
                                           IslandLayout{4, 1, 1, "dp4_zero1"},
                                           IslandLayout{4, 3, 1, "dp4_zero3"},
                                           IslandLayout{2, 0, 2, "pp2_dp2"},
                                           IslandLayout{2, 1, 1, "cp2_dp2_zero1", 2}),
                         [](const auto& i) { return i.param.name; });

// --- H = 20: 1/20 of the bytes between the islands -------------------------------------------

TEST(Diloco, TwentyInnerStepsSendOneTwentiethOfSynchronousDpBytesBetweenIslands) {
  // Two replicas on two emulated sites 1,000 km apart (5 ms, 10 Gb/s), explicit ring all-reduce
  // so every byte between them is a delayed message. Synchronous DP: its dp group is the link.
  const std::string common = tiny(
      " --set train.steps=40 --set parallel.dp=2 --set parallel.allreduce=ring "
      "--set emulate.sites=2 --set emulate.latency_ms=5 --set emulate.gbps=10");
  const std::string sync = fresh_dir("h20_sync"), dl = fresh_dir("h20_diloco");
  ASSERT_EQ(run_trillion(launch(2, common, sync)).exit_code, 0);
  const auto r =
      run_trillion(launch(2, common + " --set diloco.islands=2 --set diloco.inner_steps=20", dl));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto ms = read_metrics(sync), md = read_metrics(dl);
  ASSERT_EQ(md.size(), 40u);
  double sync_gradient = 0, sync_total = 0, diloco_total = 0;
  for (size_t s = 0; s < 40; ++s) {
    // The ring over 2 ranks sends half of each buffer: P floats of gradient, and the 2 doubles
    // of loss and noise-scale sum (16 bytes).
    const double all_reduce = bytes(ms[s], "dp", "all_reduce");
    EXPECT_EQ(all_reduce, kParams * 4.0 + 16) << "step " << s + 1;
    sync_gradient += all_reduce - 16;
    sync_total += ms[s]["comm_bytes"].get<double>();
    diloco_total += md[s]["comm_bytes"].get<double>();
    const bool round = (s + 1) % 20 == 0;
    EXPECT_EQ(bytes(md[s], "islands", "all_reduce"), round ? kParams * 4.0 : 0.0) << s + 1;
    EXPECT_EQ(md[s]["comm"]["dp"].size(), 0u);  // islands of one rank: nothing else is sent
  }
  EXPECT_EQ(diloco_total * 20, sync_gradient);
  EXPECT_NEAR(diloco_total / sync_total, 1.0 / 20, 0.001 / 20);
  // Measured, not asserted (timing): the steps waited on the link.
  const auto a = read_json(sync + "/summary.json"), b = read_json(dl + "/summary.json");
  std::printf("40 steps across the emulated link: synchronous %.3f s, DiLoCo H=20 %.3f s\n",
              a["train_seconds"].get<double>(), b["train_seconds"].get<double>());
  EXPECT_EQ(b["diloco"]["exchanges"], 2);
  EXPECT_EQ(b["diloco"]["bytes_between_islands"], 2 * kParams * 4);
}

// --- Streaming DiLoCo: quantised bytes, exact resume with an exchange in flight ----------------

struct Streaming {
  int dp, zero;
  std::string precision, pattern;
};
void PrintTo(const Streaming& v, std::ostream* os) {
  *os << v.precision << " " << v.pattern << " dp " << v.dp << " zero " << v.zero;
}
class StreamingDiloco : public ::testing::TestWithParam<Streaming> {};

TEST_P(StreamingDiloco, ResumesBitwiseWithAnExchangeInFlight) {
  const Streaming v = GetParam();
  // H = 4 over 2 fragments: fragment 0 sends after steps 2, 6, 10, fragment 1 after 4, 8, 12,
  // each merged one step later. Stopping after step 6 checkpoints fragment 0's exchange in flight.
  const std::string args = tiny(
      " --set train.steps=12 --set train.eval_every=3 --set parallel.dp=" + std::to_string(v.dp) +
      " --set parallel.zero=" + std::to_string(v.zero) +
      " --set diloco.islands=2 --set diloco.inner_steps=4 --set diloco.fragments=2 "
      "--set diloco.overlap_steps=1 --set diloco.outer_precision=" +
      v.precision + " --set diloco.fragment_pattern=" + v.pattern);
  const std::string tag = v.precision + "_" + v.pattern + std::to_string(v.dp);
  const std::string whole = fresh_dir("stream_whole_" + tag), parts = fresh_dir("stream_" + tag);
  ASSERT_EQ(run_trillion(launch(v.dp, args, whole)).exit_code, 0);
  ASSERT_EQ(run_trillion(launch(v.dp, args + " --stop-after 6", parts)).exit_code, 0);
  const auto checkpoint = read_json(parts + "/checkpoints/step_00000006/diloco.json");
  ASSERT_EQ(checkpoint["pending"].size(), 1u);
  EXPECT_EQ(checkpoint["pending"][0]["fragment"], 0);
  EXPECT_EQ(checkpoint["pending"][0]["merge_step"], 7);
  const auto resumed = run_trillion(launch(v.dp, args + " --resume", parts));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto cmp = run_trillion("compare " + whole + " " + parts + " --tol 0");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
  const auto cmp_val =
      run_trillion("compare " + whole + " " + parts + " --metric val_loss --tol 0");
  EXPECT_EQ(cmp_val.exit_code, 0) << cmp_val.output;
  if (v.dp / 2 > 1) {  // islands of 2 ranks measure the noise scale; its averages resume too
    const auto cmp_noise =
        run_trillion("compare " + whole + " " + parts + " --metric gradient_noise_scale --tol 0");
    EXPECT_EQ(cmp_noise.exit_code, 0) << cmp_noise.output;
  }

  const auto m = read_metrics(whole);
  ASSERT_EQ(m.size(), 12u);
  for (int s = 1; s <= 12; ++s) {
    const auto& d = m[s - 1]["diloco"];
    const int sending = s % 2 == 0 ? (s / 2 - 1) % 2 : -1;
    EXPECT_EQ(d.contains("sent"), sending >= 0) << s;
    EXPECT_EQ(d.contains("merged"), s >= 3 && s % 2 == 1) << s;  // one step after each send
    if (sending < 0) continue;
    EXPECT_EQ(d["sent"][0], sending);
    if (v.zero != 0) continue;
    // Every rank holds the whole fragment: an all-gather of 2 islands' encodings sends one.
    const int64_t n = sending == 0 ? kFragment0 : kFragment1;
    const double expected =
        v.precision == "bf16" ? 2.0 * n : 4.0 * (((n + 1) / 2 + (n + 127) / 128 * 4 + 3) / 4);
    EXPECT_EQ(bytes(m[s - 1], "islands", "all_gather"), expected) << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Exchange, StreamingDiloco,
                         ::testing::Values(Streaming{2, 0, "bf16", "sequential"},
                                           Streaming{2, 0, "fp4", "strided"},
                                           Streaming{4, 1, "fp4", "strided"}),
                         [](const auto& i) {
                           return i.param.precision + "_" + i.param.pattern + "_dp" +
                                  std::to_string(i.param.dp) + "_zero" +
                                  std::to_string(i.param.zero);
                         });

// --- The all-reduce algorithms and the link emulator train the same run ------------------------

TEST(ScaleOutTraining, AllReduceAlgorithmsAndEmulatedLinksTrainTheSameRun) {
  const std::string common = tiny(" --set train.steps=4");
  const std::string ref = shared_run(kEnv + common);
  const std::pair<std::string, std::string> cases[] = {
      {" --set parallel.allreduce=ring", "allreduce ring"},
      {" --set parallel.allreduce=hierarchical --set parallel.ranks_per_node=2",
       "allreduce hierarchical (2 ranks per node)"},
      {" --set emulate.sites=2 --set emulate.latency_ms=1 --set emulate.gbps=10",
       "emulated links between 2 sites: 1 ms one way, 10 Gb/s"},
  };
  int i = 0;
  for (const auto& [sets, event] : cases) {
    const std::string run = fresh_dir("algorithm_" + std::to_string(i++));
    const auto r = run_trillion(launch(4, common + " --set parallel.dp=4" + sets, run));
    ASSERT_EQ(r.exit_code, 0) << sets << "\n" << r.output;
    const auto cmp = run_trillion("compare " + ref + " " + run + " --tol 1e-5");
    EXPECT_EQ(cmp.exit_code, 0) << sets << "\n" << cmp.output;
    std::ifstream log(run + "/events.log");
    const std::string events((std::istreambuf_iterator<char>(log)), {});
    EXPECT_NE(events.find(event), std::string::npos) << events;
    EXPECT_EQ(read_json(run + "/summary.json")["parallel"]["allreduce"],
              sets.find("hierarchical") != std::string::npos ? "hierarchical"
              : sets.find("ring") != std::string::npos       ? "ring"
                                                             : "mpi");
  }
}

// --- The gradient noise scale does not depend on where its estimates come from -----------------

TEST(NoiseScale, RanksOrMicroBatchesGiveTheSameEstimate) {
  // Two estimates of 2 sequences each per step: the two dp ranks' halves of the micro-batch
  // (ZeRO 0 or 1), or one rank's two micro-batches of 2 (ZeRO 2 reduces each): the same samples.
  const std::string common = tiny(" --set train.steps=8 --set data.source=markov");
  const std::string a = fresh_dir("noise_dp2"), b = fresh_dir("noise_dp2_z1"),
                    c = fresh_dir("noise_accum2"), d = fresh_dir("noise_one");
  ASSERT_EQ(run_trillion(launch(2, common + " --set parallel.dp=2", a)).exit_code, 0);
  ASSERT_EQ(
      run_trillion(launch(2, common + " --set parallel.dp=2 --set parallel.zero=1", b)).exit_code,
      0);
  ASSERT_EQ(run_trillion(kEnv + common +
                         " --set train.micro_batch=2 --set train.grad_accum=2 --set "
                         "parallel.zero=2 --run-dir " +
                         c)
                .exit_code,
            0);
  ASSERT_EQ(run_trillion(kEnv + common + " --run-dir " + d).exit_code, 0);
  const auto ma = read_metrics(a), mb = read_metrics(b), mc = read_metrics(c), md = read_metrics(d);
  ASSERT_EQ(ma.size(), 8u);
  ASSERT_TRUE(ma.back().contains("gradient_noise_scale"));
  for (size_t s = 0; s < ma.size(); ++s) {
    // Logged once the averaged |G|^2 is positive; then in every layout alike.
    EXPECT_EQ(mb[s].contains("gradient_noise_scale"), ma[s].contains("gradient_noise_scale"));
    EXPECT_EQ(mc[s].contains("gradient_noise_scale"), ma[s].contains("gradient_noise_scale"));
    EXPECT_FALSE(md[s].contains("gradient_noise_scale"));  // one estimate per step: none
    if (!ma[s].contains("gradient_noise_scale")) continue;
    const double x = ma[s]["gradient_noise_scale"];
    EXPECT_NEAR(mb[s]["gradient_noise_scale"].get<double>() / x, 1.0, 1e-4) << s + 1;
    EXPECT_NEAR(mc[s]["gradient_noise_scale"].get<double>() / x, 1.0, 1e-4) << s + 1;
  }
  EXPECT_EQ(read_json(a + "/summary.json")["gradient_noise_scale"],
            ma.back()["gradient_noise_scale"]);
}

}  // namespace
}  // namespace trillion
