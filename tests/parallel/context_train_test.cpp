// Context parallelism in whole runs under `trillion launch`: cp 2 and 4, zigzag and contiguous,
// cp 2 x tp 2 (SP on) and cp 2 x dp 2 (ZeRO 1), each trains the one-process run of the same
// config (configs/tiny.toml, 2 micro-batches, 2 steps, attention tiles of 3 so no chunk is a
// multiple of the tile, a clip that binds; ONE shared reference run): losses and final weights
// within 1e-5 (`trillion compare`), the clipped gradient norm within 1e-6 relative. Rank 0's bytes
// over the cp group each step (metrics.jsonl comm.cp) equal plan/context_ring.h's formula (the
// one the planner times): per micro-batch and layer (cp-1) K/V blocks forward and (cp-1) K/V +
// cp dK/dV blocks backward.
// Every rank's activation bytes equal plan/'s formula with cp (those of a T/cp sequence), as
// summary.json reports them beside the measured ones. Bad cp layouts are refused by name.
// cp 2 x dp 2 under ZeRO-0, 2 and 3 (gradients and parameters sharded over dp x cp) and cp 2 x
// tp 2 without SP too. Activations are exactly 1/cp of the layout's without cp; each rank's
// workspace holds ring attention's buffers, which summary.json predicts (plan/context_ring.h),
// and (tp = dp = 1) exactly the workspace of a one-process run of T/cp tokens besides. Each
// rank's counted causal attention FLOPs (summary.json "context") are equal under zigzag and in
// contiguous's max/mean ratio of row blocks. cp 2 with selective and full recomputation replays
// the forward ring: (cp-1) more K/V blocks per layer and micro-batch, asserted from the counters.
// cp 2 x pp 2 (1F1B, GPipe, zb-h1, zb-h2) trains the same reference with plan/'s per-stage
// activation bytes; interleaved 1F1B and DualPipe train a 4-layer, 4-micro-batch reference;
// cp checkpoints resume at other layouts (cp2 x pp2 -> one process, cp2 -> tp2, one process ->
// cp2, cp2 zigzag -> cp4 contiguous) and, written asynchronously, at cp 2 bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "../train/cli_util.h"
#include "core/error.h"
#include "model/config.h"
#include "plan/context_ring.h"
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

constexpr int kLayers = 2, kMicro = 2, kBatch = 4, kSeq = 32, kWidth = 32, kHeads = 4, kKv = 2;

std::string flags() {
  return "train " + config_path("tiny.toml") +
         " --quiet --set train.steps=2 --set model.attention_block=3 --set train.grad_accum=" +
         std::to_string(kMicro) + " --set optim.grad_clip=0.5";
}

struct Layout {
  int cp;
  std::string split;
  int tp = 1, dp = 1, zero = 0;
  std::string name;
  bool sp = true;                  // with tp > 1
  std::string recompute = "none";  // model.recompute
};

// The tiny config's model (flags()), as the trainer builds it.
ModelConfig tiny_model(int64_t layers = kLayers) {
  ModelConfig mc;
  mc.vocab_size = 64, mc.d_model = kWidth, mc.n_layers = layers, mc.n_heads = kHeads,
  mc.n_kv_heads = kKv, mc.ffn_hidden = 64, mc.seq_len = kSeq;
  mc.validate();
  return mc;
}
void PrintTo(const Layout& l, std::ostream* os) {
  *os << l.name;
}

class ContextParallelRun : public ::testing::TestWithParam<Layout> {};

TEST_P(ContextParallelRun, TrainsTheOneProcessRunWithTheFormulaBytes) {
  const Layout l = GetParam();
  const std::string ref = shared_run(kEnv + flags());
  const std::string run = fresh_dir("context_" + l.name);
  const std::string layout =
      " --set parallel.cp=" + std::to_string(l.cp) + " --set parallel.cp_split=" + l.split +
      " --set parallel.tp=" + std::to_string(l.tp) + " --set parallel.dp=" + std::to_string(l.dp) +
      " --set parallel.zero=" + std::to_string(l.zero) +
      " --set parallel.sp=" + (l.sp ? "true" : "false") + " --set model.recompute=" + l.recompute;
  const bool sp = l.sp && l.tp > 1;
  const int world = l.cp * l.tp * l.dp;
  const auto r = run_trillion(kEnv + "launch -n " + std::to_string(world) + " -- " + flags() +
                              " --run-dir " + run + layout);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto cmp = run_trillion("compare " + ref + " " + run + " --tol 1e-5");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
  EXPECT_NE(cmp.output.find("MATCH"), std::string::npos) << cmp.output;

  const auto ref_lines = read_metrics(ref), run_lines = read_metrics(run);
  ASSERT_EQ(run_lines.size(), 2u);
  ASSERT_EQ(ref_lines.size(), run_lines.size());
  EXPECT_GT(ref_lines[0]["grad_norm"].get<double>(), 0.5);  // the clip binds
  for (size_t i = 0; i < ref_lines.size(); ++i) {
    const double want = ref_lines[i]["grad_norm"].get<double>();
    EXPECT_NEAR(run_lines[i]["grad_norm"].get<double>(), want, 1e-6 * want) << "step " << i + 1;
  }

  // Bytes over cp: plan/context_ring.h's, for a K/V block of B_local * T/cp * 2 (KV/tp) HD
  // floats, per layer and micro-batch.
  ModelConfig mc = tiny_model();
  mc.set_recompute(l.recompute);
  const int64_t head_dim = kWidth / kHeads, local_batch = kBatch / l.dp;
  const plan::TensorSplit split{l.tp, sp, l.cp};
  const int64_t block = plan::context_ring_block_bytes(mc.spec(), local_batch, kSeq, 4, split);
  EXPECT_EQ(block, local_batch * (kSeq / l.cp) * 2 * (kKv / l.tp) * head_dim * 4);
  const plan::RingBytes ring = plan::context_ring_bytes(l.cp, static_cast<uint64_t>(block));
  EXPECT_EQ(ring.forward, static_cast<uint64_t>((l.cp - 1) * block));
  EXPECT_EQ(ring.backward, static_cast<uint64_t>((2 * l.cp - 1) * block));
  // Recomputation (selective: the attention core; full: the layer) replays the forward ring.
  const uint64_t replay = l.recompute == "none" ? 0 : ring.forward;
  const double per_step = static_cast<double>(kMicro * kLayers * (ring.total() + replay));
  for (const auto& m : run_lines) {
    EXPECT_EQ(m["comm"]["cp"]["send"].get<double>(), per_step) << m.dump();
  }

  // Every rank's activations: plan/'s formula for a T/cp sequence (and tp, sp), measured; exactly
  // 1/cp of the layout without cp, and (tp = 1) 1/(dp cp) of the one-process run's measured bytes.
  const int64_t predicted =
      plan::engine_activation_bytes(mc.spec(), local_batch, kSeq, mc.activation_policy(), 4, 4, {},
                                    1, split)
          .total();
  const int64_t no_cp =
      plan::engine_activation_bytes(mc.spec(), local_batch, kSeq, mc.activation_policy(), 4, 4, {},
                                    1, {l.tp, sp, 1})
          .total();
  EXPECT_EQ(predicted * l.cp, no_cp);
  const int64_t one_process =
      read_json(ref + "/summary.json")["memory_per_rank"][0]["current"]["activations"]
          .get<int64_t>();
  if (l.tp == 1 && l.recompute == "none") {  // the reference stores every activation
    EXPECT_EQ(predicted * l.cp * l.dp, one_process);
  }
  // Workspace: ring attention's 5 blocks (2 K/V, 3 dK/dV), predicted beside the measured bytes,
  // which hold them and (tp = dp = 1) exactly the scratch of a one-process run of T/cp tokens.
  const int64_t ring_buffers =
      plan::context_ring_buffer_bytes(mc.spec(), local_batch, kSeq, 4, split);
  EXPECT_EQ(ring_buffers, 5 * block);
  int64_t scratch = 0;
  if (l.tp == 1 && l.dp == 1) {
    const std::string short_run =
        shared_run(kEnv + flags() + " --set model.seq_len=" + std::to_string(kSeq / l.cp) +
                   " --set model.recompute=" + l.recompute);
    scratch = read_json(short_run + "/summary.json")["memory_per_rank"][0]["current"]["workspace"]
                  .get<int64_t>();
    EXPECT_GT(scratch, 0);
  }
  const auto summary = read_json(run + "/summary.json");
  // Balance: each rank's counted causal attention FLOPs (summary.json "context"); zigzag gives
  // every rank the same (the bar: within 1%; here exactly, T = 32 cuts into 2 cp equal
  // chunks), contiguous the max/mean of its row blocks' causal pairs (rows r T/cp .. (r+1) T/cp - 1
  // see i + 1 keys each).
  double want_ratio = 1;
  if (l.split == "contiguous") {
    const int64_t rows = kSeq / l.cp;
    double most = 0, total = 0;
    for (int r = 0; r < l.cp; ++r) {
      double pairs = 0;
      for (int64_t i = r * rows; i < (r + 1) * rows; ++i) pairs += static_cast<double>(i + 1);
      most = std::max(most, pairs), total += pairs;
    }
    want_ratio = most / (total / l.cp);
  }
  const auto& balance = summary["context"];
  ASSERT_EQ(balance["attention_forward_flops_per_rank"].size(), static_cast<size_t>(world));
  for (const auto& f : balance["attention_forward_flops_per_rank"]) EXPECT_GT(f.get<double>(), 0);
  const double ratio = balance["attention_balance_max_over_mean"].get<double>();
  EXPECT_NEAR(ratio, want_ratio, 1e-12 * want_ratio) << l.name;
  if (l.split == "zigzag") {
    EXPECT_LE(ratio, 1.01) << l.name;
  }
  std::printf("[context %s] attention FLOPs per rank max/mean %.4f\n", l.name.c_str(), ratio);
  for (int rank = 0; rank < world; ++rank) {
    const auto& m = summary["memory_per_rank"][rank];
    EXPECT_EQ(m["current"]["activations"].get<int64_t>(), predicted) << "rank " << rank;
    EXPECT_EQ(m["predicted"]["activations"].get<int64_t>(), predicted) << "rank " << rank;
    EXPECT_EQ(m["predicted"]["workspace_context_ring"].get<int64_t>(), ring_buffers)
        << "rank " << rank;
    EXPECT_GE(m["current"]["workspace"].get<int64_t>(), ring_buffers) << "rank " << rank;
    if (scratch > 0) {
      EXPECT_EQ(m["current"]["workspace"].get<int64_t>(), scratch + ring_buffers)
          << "rank " << rank;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ContextParallelRun,
    ::testing::Values(Layout{2, "zigzag", 1, 1, 0, "cp2_zigzag"},
                      Layout{2, "contiguous", 1, 1, 0, "cp2_contiguous"},
                      Layout{4, "zigzag", 1, 1, 0, "cp4_zigzag"},
                      Layout{4, "contiguous", 1, 1, 0, "cp4_contiguous"},
                      Layout{2, "zigzag", 2, 1, 0, "cp2_tp2_zigzag"},
                      Layout{2, "zigzag", 2, 1, 0, "cp2_tp2_nosp_zigzag", false},
                      Layout{2, "zigzag", 1, 2, 0, "cp2_dp2_zero0_zigzag"},
                      Layout{2, "zigzag", 1, 2, 1, "cp2_dp2_zero1_zigzag"},
                      Layout{2, "zigzag", 1, 2, 2, "cp2_dp2_zero2_zigzag"},
                      Layout{2, "zigzag", 1, 2, 3, "cp2_dp2_zero3_zigzag"},
                      Layout{2, "zigzag", 2, 2, 1, "cp2_tp2_dp2_zero1_zigzag"},
                      Layout{4, "zigzag", 1, 2, 1, "cp4_dp2_zero1_zigzag"},
                      Layout{2, "zigzag", 1, 1, 0, "cp2_zigzag_selective", true, "selective"},
                      Layout{2, "zigzag", 1, 1, 0, "cp2_zigzag_full", true, "full"}),
    [](const ::testing::TestParamInfo<Layout>& i) { return i.param.name; });

// Multi-head latent attention under ring attention, both rings (parallel.cp_mla): "heads" passes
// each head's up-projected K and V (one K/V head per query head, qk 12 + v 6 wide), the
// decoupled RoPE key rotated at each row's global position; "latent" (the default here: 8 + 4 <
// 4/tp * 18) passes the normed kv latent and the rotated rope key (12 wide) and each rank
// up-projects the blocks it receives with its own Wkv_b, sending their latent gradients home and
// keeping their Wkv_b wgrad. cp 2 zigzag, cp 2 x tp 2 (SP) and cp 2 with DeepSeek-V3's norm-up
// recompute (the latent ring also with selective recompute, which replays the forward ring and
// its up-projections) train the one-process run; the cp bytes per step, each rank's activations and
// the ring's buffers are plan/'s for the ring that ran.
struct MlaCase {
  int tp;
  std::string recompute, name;
};
const std::string kMla =
    " --set model.attention=mla --set model.n_kv_heads=4 --set model.q_lora_rank=8"
    " --set model.kv_lora_rank=8 --set model.qk_nope_head_dim=8 --set model.qk_rope_head_dim=4"
    " --set model.v_head_dim=6";

void check_mla_ring(const MlaCase& c, const std::string& cp_mla) {
  const std::string extra = kMla + " --set model.recompute=" + c.recompute;
  const std::string ref = shared_run(kEnv + flags() + extra);
  const std::string run = fresh_dir("context_" + c.name + "_" + cp_mla);
  const auto r = run_trillion(kEnv + "launch -n " + std::to_string(2 * c.tp) + " -- " + flags() +
                              extra + " --run-dir " + run +
                              " --set parallel.cp=2 --set parallel.tp=" + std::to_string(c.tp) +
                              " --set parallel.cp_mla=" + cp_mla);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const bool latent = cp_mla == "latent";
  // The start line (events.log) names the ring.
  std::ifstream events_file(run + "/events.log");
  const std::string events((std::istreambuf_iterator<char>(events_file)),
                           std::istreambuf_iterator<char>());
  EXPECT_NE(events.find(latent ? "ring attention over MLA's latent rmsnorm(c_kv) | k_rope"
                               : "ring attention over MLA's per-head K/V"),
            std::string::npos)
      << events;
  const auto cmp = run_trillion("compare " + ref + " " + run + " --tol 1e-5");
  EXPECT_EQ(cmp.exit_code, 0) << c.name << " " << cp_mla << ": " << cmp.output;
  const RunConfig rc = load_run_config(
      config_path("tiny.toml"),
      {"model.attention=\"mla\"", "model.n_kv_heads=4", "model.q_lora_rank=8",
       "model.kv_lora_rank=8", "model.qk_nope_head_dim=8", "model.qk_rope_head_dim=4",
       "model.v_head_dim=6", "model.recompute=\"" + c.recompute + "\""});
  const plan::TensorSplit split{c.tp, c.tp > 1, 2};
  const plan::CpMla choice = plan::parse_cp_mla(cp_mla, "parallel.cp_mla");
  EXPECT_EQ(plan::context_ring_latent(rc.model.spec(), split), true);  // auto: the latent
  const int64_t block =
      plan::context_ring_block_bytes(rc.model.spec(), kBatch, kSeq, 4, split, choice);
  const int64_t heads_block = kBatch * (kSeq / 2) * (kHeads / c.tp) * (12 + 6) * 4;
  EXPECT_EQ(block, latent ? kBatch * (kSeq / 2) * (8 + 4) * 4 : heads_block);
  const plan::RingBytes ring = plan::context_ring_bytes(2, static_cast<uint64_t>(block));
  for (const auto& m : read_metrics(run)) {
    // Selective recompute replays the forward ring.
    const uint64_t replay = c.recompute == "selective" ? ring.forward : 0;
    EXPECT_EQ(m["comm"]["cp"]["send"].get<double>(),
              static_cast<double>(kMicro * kLayers * (ring.total() + replay)))
        << c.name << " " << cp_mla;
  }
  const int64_t predicted =
      plan::engine_activation_bytes(rc.model.spec(), kBatch, kSeq, rc.model.activation_policy(), 4,
                                    4, {}, 1, split)
          .total();
  const auto summary = read_json(run + "/summary.json");
  for (const auto& m : summary["memory_per_rank"]) {
    EXPECT_EQ(m["current"]["activations"].get<int64_t>(), predicted) << c.name << " " << cp_mla;
    EXPECT_EQ(m["predicted"]["workspace_context_ring"].get<int64_t>(),
              latent ? 5 * block + 2 * heads_block : 5 * block)
        << c.name << " " << cp_mla;
  }
}

TEST(ContextParallelMla, RingsOverThePerHeadKeysAndValues) {
  for (const MlaCase& c : {MlaCase{1, "none", "mla_cp2"}, MlaCase{2, "none", "mla_cp2_tp2"},
                           MlaCase{1, "norm-up", "mla_cp2_normup"}}) {
    check_mla_ring(c, "heads");
  }
}

TEST(ContextParallelMla, RingsOverTheLatentAndRopeKey) {
  for (const MlaCase& c :
       {MlaCase{1, "none", "mla_cp2"}, MlaCase{2, "none", "mla_cp2_tp2"},
        MlaCase{1, "norm-up", "mla_cp2_normup"}, MlaCase{1, "selective", "mla_cp2_selective"}}) {
    check_mla_ring(c, "latent");
  }
}

TEST(ContextParallelLayout, ImpossibleLayoutsAreRefusedByName) {
  const std::string dir = fresh_dir("context_refused");
  const std::pair<std::string, std::string> cases[] = {
      {"--set parallel.cp=2 --set model.seq_len=30",
       "parallel.cp = 2 with parallel.cp_split = \"zigzag\" cuts each sequence into 4 equal "
       "chunks, but model.seq_len = 30 is not a multiple of 4"},
      {"--set parallel.cp=2 --set parallel.cp_split=striped",
       "parallel.cp_split = \"striped\": expected \"zigzag\""},
      {"--set parallel.cp=2 --set model.attention=materialized",
       "parallel.cp = 2 needs model.attention_kernel = \"tiled\""},
      {"--set parallel.cp=2 --set parallel.cp_mla=kv",
       "parallel.cp_mla = \"kv\": expected \"auto\", \"heads\" or \"latent\""},
  };
  for (const auto& [set, expect] : cases) {
    const auto r = run_trillion(kEnv + "launch -n 2 -- train " + config_path("tiny.toml") +
                                " --quiet --run-dir " + dir + " " + set);
    EXPECT_EQ(r.exit_code, 2) << set << "\n" << r.output;
    EXPECT_NE(r.output.find(expect), std::string::npos) << set << "\n" << r.output;
  }
}

// cp 2 x pp 2 (4 ranks): each stage's activations are its cp rank's T/cp tokens, the pipeline
// sends T/cp rows, and the ring runs inside each stage over that stage's cp group; under 1F1B,
// GPipe and the zero-bubble schedules (zb-h1, and zb-h2 with its split backward). Same shared
// one-process reference; every rank's cp bytes are plan/context_ring.h's for its one layer, its
// activations the trainer's prediction and, under 1F1B, plan/'s formula for its stage (1F1B holds
// min(micro-batches, pp - stage) in flight) with cp = 2.
void expect_cp2_pp2_trains_the_one_process_run(const std::string& schedule) {
  const std::string ref = shared_run(kEnv + flags());
  const std::string run = fresh_dir("context_cp2_pp2_" + schedule);
  std::string layout =
      " --set parallel.cp=2 --set parallel.pp=2 --set parallel.schedule=\\\"" + schedule + "\\\"";
  if (schedule == "zb-h2") layout += " --set parallel.split_backward=true";
  const auto r = run_trillion(kEnv + "launch -n 4 -- " + flags() + " --run-dir " + run + layout);
  ASSERT_EQ(r.exit_code, 0) << schedule << "\n" << r.output;
  const auto cmp = run_trillion("compare " + ref + " " + run + " --tol 1e-5");
  EXPECT_EQ(cmp.exit_code, 0) << schedule << "\n" << cmp.output;
  EXPECT_NE(cmp.output.find("MATCH"), std::string::npos) << cmp.output;
  // Each stage holds one layer: its ring runs once per micro-batch.
  const ModelConfig mc = tiny_model();
  const uint64_t block = static_cast<uint64_t>(
      plan::context_ring_block_bytes(mc.spec(), kBatch, kSeq, 4, {1, false, 2}));
  for (const auto& m : read_metrics(run)) {
    EXPECT_EQ(m["comm"]["cp"]["send"].get<double>(),
              static_cast<double>(kMicro * plan::context_ring_bytes(2, block).total()))
        << schedule;
  }
  const auto summary = read_json(run + "/summary.json");
  for (int rank = 0; rank < 4; ++rank) {
    const auto& m = summary["memory_per_rank"][rank];
    EXPECT_EQ(m["current"]["activations"].get<int64_t>(),
              m["predicted"]["activations"].get<int64_t>())
        << schedule << " rank " << rank;
  }
  if (schedule != "1f1b") return;

  for (int rank = 0; rank < 4; ++rank) {
    const int stage = rank / 2;  // rank = pp_i * cp + cp_i
    const plan::StageExtent extent{stage, 1, stage == 1};
    const int64_t slots = std::min(kMicro, 2 - stage);
    const int64_t predicted =
        plan::engine_activation_bytes(mc.spec(), kBatch, kSeq, mc.activation_policy(), 4, 4, extent,
                                      slots, {1, false, 2})
            .total();
    const int64_t no_cp =
        plan::engine_activation_bytes(mc.spec(), kBatch, kSeq, mc.activation_policy(), 4, 4, extent,
                                      slots, {1, false, 1})
            .total();
    EXPECT_LT(predicted, no_cp);
    const auto& m = summary["memory_per_rank"][rank];
    EXPECT_EQ(m["current"]["activations"].get<int64_t>(), predicted) << "rank " << rank;
    EXPECT_EQ(m["predicted"]["activations"].get<int64_t>(), predicted) << "rank " << rank;
  }
}

TEST(ContextParallelPipeline, Cp2Pp2TrainsTheOneProcessRun) {
  expect_cp2_pp2_trains_the_one_process_run("1f1b");
  expect_cp2_pp2_trains_the_one_process_run("zb-h1");
}

TEST(ContextParallelPipeline, Cp2Pp2GpipeAndZbH2TrainTheOneProcessRun) {
  expect_cp2_pp2_trains_the_one_process_run("gpipe");
  expect_cp2_pp2_trains_the_one_process_run("zb-h2");
}

// The three-axis compositions (8 ranks, 1F1B): cp 2 x pp 2 x tp 2 (SP) and cp 2 x pp 2 x dp 2
// (ZeRO-1) train the same one-process reference; each rank's cp bytes are plan/'s for its one
// layer at its tp and dp share, and its activations the trainer's prediction.
TEST(ContextParallelPipeline, Cp2Pp2WithTp2OrDp2TrainsTheOneProcessRun) {
  const std::string ref = shared_run(kEnv + flags());
  const ModelConfig mc = tiny_model();
  for (const auto& [tp, dp] : {std::pair<int, int>{2, 1}, {1, 2}}) {
    const std::string name = tp > 1 ? "tp2" : "dp2";
    const std::string run = fresh_dir("context_cp2_pp2_" + name);
    const std::string layout =
        " --set parallel.cp=2 --set parallel.pp=2 --set parallel.tp=" + std::to_string(tp) +
        " --set parallel.dp=" + std::to_string(dp) +
        " --set parallel.zero=" + std::to_string(dp > 1 ? 1 : 0);
    const auto r = run_trillion(kEnv + "launch -n 8 -- " + flags() + " --run-dir " + run + layout);
    ASSERT_EQ(r.exit_code, 0) << name << "\n" << r.output;
    const auto cmp = run_trillion("compare " + ref + " " + run + " --tol 1e-5");
    EXPECT_EQ(cmp.exit_code, 0) << name << "\n" << cmp.output;
    EXPECT_NE(cmp.output.find("MATCH"), std::string::npos) << cmp.output;
    const uint64_t block = static_cast<uint64_t>(
        plan::context_ring_block_bytes(mc.spec(), kBatch / dp, kSeq, 4, {tp, tp > 1, 2}));
    EXPECT_EQ(block, static_cast<uint64_t>((kBatch / dp) * (kSeq / 2) * 2 * (kKv / tp) *
                                           (kWidth / kHeads) * 4));
    for (const auto& m : read_metrics(run)) {
      EXPECT_EQ(m["comm"]["cp"]["send"].get<double>(),
                static_cast<double>(kMicro * plan::context_ring_bytes(2, block).total()))
          << name;
    }
    const auto summary = read_json(run + "/summary.json");
    ASSERT_EQ(summary["memory_per_rank"].size(), 8u);
    for (const auto& m : summary["memory_per_rank"]) {
      EXPECT_GT(m["predicted"]["activations"].get<int64_t>(), 0) << name;
      EXPECT_EQ(m["current"]["activations"].get<int64_t>(),
                m["predicted"]["activations"].get<int64_t>())
          << name << " " << m;
    }
    EXPECT_EQ(summary["context"]["attention_balance_max_over_mean"].get<double>(), 1.0) << name;
  }
}

// cp 2 x pp 2 under the schedules with two chunks per rank: interleaved 1F1B (4 layers: 2 stages
// x 2 chunks) and DualPipe (its two model copies; it needs >= 2 pp micro-batches). One shared
// one-process reference of that config (4 layers, 4 micro-batches); every rank's activations
// (both chunks' slots) equal plan/'s formula with cp = 2 as the trainer predicts them.
TEST(ContextParallelPipeline, Cp2Pp2InterleavedAndDualPipeTrainTheOneProcessRun) {
  const std::string two_chunk_flags = "train " + config_path("tiny.toml") +
                                      " --quiet --set train.steps=2 --set model.attention_block=3"
                                      " --set train.grad_accum=4 --set model.n_layers=4"
                                      " --set optim.grad_clip=0.5";
  const std::string ref = shared_run(kEnv + two_chunk_flags);
  for (const std::string schedule : {"interleaved", "dualpipe"}) {
    const std::string run = fresh_dir("context_cp2_pp2_" + schedule);
    std::string layout =
        " --set parallel.cp=2 --set parallel.pp=2 --set parallel.schedule=\\\"" + schedule + "\\\"";
    if (schedule == "interleaved") layout += " --set parallel.chunks=2";
    const auto r =
        run_trillion(kEnv + "launch -n 4 -- " + two_chunk_flags + " --run-dir " + run + layout);
    ASSERT_EQ(r.exit_code, 0) << schedule << "\n" << r.output;
    const auto cmp = run_trillion("compare " + ref + " " + run + " --tol 1e-5");
    EXPECT_EQ(cmp.exit_code, 0) << schedule << "\n" << cmp.output;
    EXPECT_NE(cmp.output.find("MATCH"), std::string::npos) << cmp.output;
    const auto summary = read_json(run + "/summary.json");
    for (int rank = 0; rank < 4; ++rank) {
      const auto& m = summary["memory_per_rank"][rank];
      EXPECT_GT(m["predicted"]["activations"].get<int64_t>(), 0) << schedule << " rank " << rank;
      EXPECT_EQ(m["current"]["activations"].get<int64_t>(),
                m["predicted"]["activations"].get<int64_t>())
          << schedule << " rank " << rank;
    }
  }
}

// A cp 2 x pp 2 run (4 ranks) stopped after step 3 resumes in one process, a cp 2 run at tp 2,
// a one-process run at cp 2, and a cp 2 zigzag run at cp 4 contiguous: the continued runs match
// the uninterrupted runs at the new layout within 1e-5. A cp 2 run with async checkpoints
// resumes at cp 2 bitwise.
std::string resumable(int n, const std::string& layout) {
  return kEnv + (n == 1 ? "" : "launch -n " + std::to_string(n) + " -- ") + "train " +
         config_path("tiny.toml") + " --quiet --set train.steps=6 --set train.checkpoint_every=3 " +
         layout;
}
struct Resume {
  int from_n;
  std::string from;
  int to_n;
  std::string to, name;
};
void expect_resume_matches(const Resume& c) {
  const std::string reference = shared_run(resumable(c.to_n, c.to));
  const std::string dir = fresh_dir(c.name);
  const auto first =
      run_trillion(resumable(c.from_n, c.from) + " --run-dir " + dir + " --stop-after 3");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto resumed = run_trillion(resumable(c.to_n, c.to) + " --run-dir " + dir + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const std::string events = testing::slurp(dir + "/events.log");
  EXPECT_TRUE(testing::has(events, "resumed from " + dir + "/checkpoints/step_00000003 at step 3"))
      << c.name << "\n"
      << events;
  const auto cmp = run_trillion("compare " + reference + " " + dir + " --tol 1e-5");
  EXPECT_EQ(cmp.exit_code, 0) << c.name << "\n" << cmp.output;
  EXPECT_TRUE(testing::has(cmp.output, "MATCH")) << c.name << "\n" << cmp.output;
}

TEST(ContextParallelResume, CheckpointsResumeAtAnotherLayout) {
  expect_resume_matches(
      {4, "--set parallel.cp=2 --set parallel.pp=2", 1, "", "context_resume_cp2pp2_one"});
  expect_resume_matches(
      {2, "--set parallel.cp=2", 2, "--set parallel.tp=2", "context_resume_cp2_tp2"});
}

TEST(ContextParallelResume, OneProcessCheckpointResumesAtCp2) {
  expect_resume_matches({1, "", 2, "--set parallel.cp=2", "context_resume_one_cp2"});
}

TEST(ContextParallelResume, Cp2ZigzagCheckpointResumesAtCp4Contiguous) {
  expect_resume_matches({2, "--set parallel.cp=2", 4,
                         "--set parallel.cp=4 --set parallel.cp_split=contiguous",
                         "context_resume_cp2_cp4_contiguous"});
}

// A checkpoint whose optimizer state is sharded over dp x cp (ZeRO-2 at cp 2 x dp 2: each of the 4
// ranks owns a quarter of the gradients and moments) resumes in one process and at cp 2 x tp 2.
TEST(ContextParallelResume, ZeroShardedCpCheckpointResumesElsewhere) {
  const std::string z2 = "--set parallel.cp=2 --set parallel.dp=2 --set parallel.zero=2";
  expect_resume_matches({4, z2, 1, "", "context_resume_cp2dp2z2_one"});
  expect_resume_matches(
      {4, z2, 4, "--set parallel.cp=2 --set parallel.tp=2", "context_resume_cp2dp2z2_cp2tp2"});
}

TEST(ContextParallelResume, AsyncCheckpointsResumeBitwise) {
  const std::string cp2 = "--set parallel.cp=2";
  const std::string reference = shared_run(resumable(2, cp2));
  const std::string async = cp2 + " --set checkpoint.async=true";
  const std::string dir = fresh_dir("context_resume_cp2_async");
  const auto first = run_trillion(resumable(2, async) + " --run-dir " + dir + " --stop-after 3");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string events = testing::slurp(dir + "/events.log");
  EXPECT_TRUE(testing::has(events, "/checkpoints/step_00000003 written (async")) << events;
  const auto resumed = run_trillion(resumable(2, async) + " --run-dir " + dir + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(testing::has(testing::slurp(dir + "/events.log"),
                           "resumed from " + dir + "/checkpoints/step_00000003 at step 3"));
  const auto cmp = run_trillion("compare " + reference + " " + dir + " --tol 0");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
  EXPECT_TRUE(testing::has(cmp.output, "(bitwise equal)")) << cmp.output;
}

}  // namespace
}  // namespace trillion
