// Pipeline parallelism under `trillion launch`: pp in {2, 4} x every schedule x dp in {1, 2} (dp 2
// with ZeRO-1) trains the one-process run of the same global batch and micro-batch count (8
// layers, 8 micro-batches, 2 steps of configs/tiny.toml): losses and final weights within 1e-5.
// Every run also asserts, per pipeline rank, that the peak activation slots in use equal the
// schedule simulator's in-flight count, that the activation bytes equal slots x per-slot bytes
// from plan/, and that the bytes sent over the pp group equal the formula (one [N, C] activation
// or gradient per remote stage boundary and micro-batch, plus the loss and norm all-reduces)
// exactly, on rank 0 from metrics.jsonl and on every rank from summary.json. An uneven split (8
// layers on 3 stages) with a binding clip matches too (the norm is over all stages). And: the run
// writes trace.json that `trillion schedule --from-trace` draws; an explicit split
// (parallel.partition) trains the same run with plan/'s memory; layouts that cannot run are
// refused by name; a rank killed mid-pipeline ends the job in one line.
#include <gtest/gtest.h>

#include <fstream>

#include "../train/cli_util.h"
#include "model/config.h"
#include "plan/activation_memory.h"
#include "plan/memory.h"
#include "plan/parameter_table.h"
#include "plan/stage_partition.h"
#include "schedule/generators.h"
#include "schedule/simulator.h"

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

constexpr int kLayers = 8, kMicro = 8, kBatch = 4, kSeq = 32, kWidth = 32;

std::string flags() {
  return "train " + config_path("tiny.toml") +
         " --quiet --set train.steps=2 --set model.n_layers=" + std::to_string(kLayers) +
         " --set train.grad_accum=" + std::to_string(kMicro);
}

struct Layout {
  int pp, dp;
  std::string schedule;
  int chunks;
  std::string name;
};
void PrintTo(const Layout& l, std::ostream* os) {
  *os << l.name;
}

class Pipeline : public ::testing::TestWithParam<Layout> {};

TEST_P(Pipeline, SameRunSlotsBytesAndMemory) {
  const Layout l = GetParam();
  const std::string ref = shared_run(kEnv + flags());
  const std::string run = fresh_dir("pipeline_" + l.name);
  const std::string layout =
      " --set parallel.pp=" + std::to_string(l.pp) + " --set parallel.dp=" + std::to_string(l.dp) +
      " --set parallel.zero=" + std::to_string(l.dp > 1 ? 1 : 0) +
      " --set parallel.schedule=" + l.schedule +
      (l.chunks > 1 ? " --set parallel.chunks=" + std::to_string(l.chunks) : std::string());
  const auto r = run_trillion(kEnv + "launch -n " + std::to_string(l.pp * l.dp) + " -- " + flags() +
                              " --run-dir " + run + layout);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto cmp = run_trillion("compare " + ref + " " + run + " --tol 1e-5");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;

  // The schedule the ranks ran, and the stages on each pipeline rank.
  const schedule::Schedule s =
      schedule::generate_schedule(schedule::parse_schedule_kind(l.schedule), l.pp, kMicro,
                                  l.schedule == "dualpipe" ? 2 : l.chunks);
  const auto partition = plan::partition_stages(kLayers, s.num_stages(0));
  const auto summary = read_json(run + "/summary.json");
  const auto& pipe = summary["pipeline"];
  ASSERT_TRUE(pipe.is_object()) << summary.dump(2);
  EXPECT_EQ(pipe["pp"], l.pp);
  EXPECT_EQ(pipe["microbatches"], kMicro);

  ModelConfig mc;
  mc.vocab_size = 64, mc.d_model = kWidth, mc.n_layers = kLayers, mc.n_heads = 4, mc.n_kv_heads = 2,
  mc.ffn_hidden = 64, mc.seq_len = kSeq;
  mc.validate();
  const int64_t local_batch = kBatch / l.dp, N = local_batch * kSeq;
  for (int p = 0; p < l.pp; ++p) {
    const std::vector<int> slots = schedule::inflight_slots(s, p);
    EXPECT_EQ(pipe["peak_slots"][p].get<std::vector<int>>(), slots) << "pipeline rank " << p;
    // Activation bytes of the rank's stages: slots x per-slot bytes of the plan formula.
    std::vector<int> stage_of_chunk(s.num_chunks, -1);
    for (const auto& path : s.paths) {
      for (int st = 0; st < static_cast<int>(path.size()); ++st) {
        if (path[st].rank == p) stage_of_chunk[path[st].chunk] = st;
      }
    }
    int64_t predicted = 0;
    for (int c = 0; c < s.num_chunks; ++c) {
      const auto& u = partition[stage_of_chunk[c]];
      const int64_t first = u.first_unit == 0 ? 0 : u.first_unit - 1;
      const int64_t last = std::min<int64_t>(u.last_unit, kLayers);
      const plan::StageExtent extent{first, last - first, u.last_unit == kLayers + 1};
      predicted += plan::engine_activation_bytes(mc.spec(), local_batch, kSeq,
                                                 mc.activation_policy(), 4, 4, extent, slots[c])
                       .total();
    }
    for (int d = 0; d < l.dp; ++d) {
      const auto& rank = summary["memory_per_rank"][p * l.dp + d];
      EXPECT_EQ(rank["current"]["activations"].get<int64_t>(), predicted)
          << "pipeline rank " << p << " dp " << d;
    }
  }

  // Bytes over the pp group of world rank 0 (pipeline rank 0, which writes the metrics): its
  // sends of activations and gradients, plus two all-reduces: the loss (8 bytes) and the gradient
  // norm (8 bytes, 16 with the gradient noise scale's sum of the ranks' squared norms, measured
  // when dp >= 2 without DualPipe).
  int64_t sends = 0;
  for (const schedule::Action& a : s.actions[0]) {
    if (a.kind == schedule::ActionKind::kSendF || a.kind == schedule::ActionKind::kSendB) ++sends;
  }
  const bool noise_scale = l.dp > 1 && l.schedule != "dualpipe";
  const double scalars = (noise_scale ? 3.0 : 2.0) * 8 * 2.0 * (l.pp - 1) / l.pp;
  // Every pipeline rank's own sends of the last step (the group's counters, gathered into
  // summary.json): one [N, C] fp32 activation or gradient per SEND action of its list.
  for (int p = 0; p < l.pp; ++p) {
    int64_t rank_sends = 0;
    for (const schedule::Action& a : s.actions[p]) {
      if (a.kind == schedule::ActionKind::kSendF || a.kind == schedule::ActionKind::kSendB) {
        ++rank_sends;
      }
    }
    EXPECT_GT(rank_sends, 0) << "pipeline rank " << p;
    EXPECT_EQ(pipe["pp_sent_bytes"][p].get<int64_t>(), rank_sends * N * kWidth * 4)
        << "pipeline rank " << p;
  }
  for (const auto& m : read_metrics(run)) {
    const auto& pp = m["comm"]["pp"];
    EXPECT_EQ(pp["send"].get<double>(), static_cast<double>(sends * N * kWidth * 4)) << m.dump();
    EXPECT_EQ(pp["all_reduce"].get<double>(), scalars) << m.dump();
  }

  // The measured timeline draws like a simulated one.
  const auto drawn = run_trillion("schedule --from-trace " + run + "/trace.json --json", false);
  ASSERT_EQ(drawn.exit_code, 0) << drawn.output;
  const auto dj = nlohmann::json::parse(drawn.output);
  EXPECT_EQ(dj["stages"], l.pp);
  EXPECT_GT(dj["makespan_seconds"].get<double>(), 0);
}

std::vector<Layout> layouts() {
  std::vector<Layout> all;
  for (int pp : {2, 4}) {
    for (const char* sched : {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "dualpipe"}) {
      for (int dp : {1, 2}) {
        const int chunks = std::string(sched) == "interleaved" ? 2 : 1;
        std::string name =
            std::string(sched) + "_pp" + std::to_string(pp) + "_dp" + std::to_string(dp);
        for (char& c : name) c = c == '-' ? '_' : c;
        all.push_back({pp, dp, sched, chunks, name});
      }
    }
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(EverySchedule, Pipeline, ::testing::ValuesIn(layouts()),
                         [](const ::testing::TestParamInfo<Layout>& i) { return i.param.name; });

// Tied embeddings with the embedding and the head on different pipeline ranks, under every
// schedule that separates them (DualPipe's ranks hold both ends: covered by the parity tests):
// the head's rank keeps a copy of the table, the head's gradient of it joins the first stage's
// before the reduction and the updated table comes back after each update
// (parallel/pipeline/tied_embedding.h). The run is the one-process tied run; the first and last
// pipeline ranks each send one V x C fp32 table per step beside their activations (the last its
// gradient during the schedule, rank 0 the table after the update: from metrics.jsonl); the head's
// rank holds the copy's parameters, as plan/'s params_of_rank counts them.
struct TiedLayout {
  int pp, dp;
  std::string schedule;
  int chunks;
  std::string name;
};
void PrintTo(const TiedLayout& l, std::ostream* os) {
  *os << l.name;
}
class TiedPipeline : public ::testing::TestWithParam<TiedLayout> {};

TEST_P(TiedPipeline, TrainsTheOneProcessTiedRun) {
  const TiedLayout l = GetParam();
  const std::string tied = " --set model.tied_embeddings=true";
  const std::string ref = shared_run(kEnv + flags() + tied);
  const std::string run = fresh_dir("pipeline_tied_" + l.name);
  const auto r = run_trillion(
      kEnv + "launch -n " + std::to_string(l.pp * l.dp) + " -- " + flags() + tied + " --run-dir " +
      run + " --set parallel.pp=" + std::to_string(l.pp) + " --set parallel.dp=" +
      std::to_string(l.dp) + " --set parallel.zero=" + std::to_string(l.dp > 1 ? 1 : 0) +
      " --set parallel.schedule=" + l.schedule +
      (l.chunks > 1 ? " --set parallel.chunks=" + std::to_string(l.chunks) : std::string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto cmp = run_trillion("compare " + ref + " " + run + " --tol 1e-5");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;

  const schedule::Schedule s = schedule::generate_schedule(schedule::parse_schedule_kind(l.schedule),
                                                           l.pp, kMicro, l.chunks);
  const int64_t N = kBatch / l.dp * kSeq, table = 64 * kWidth * 4;  // V x C fp32
  const auto summary = read_json(run + "/summary.json");
  auto sends_of = [&](int p) {
    int64_t sends = 0;
    for (const schedule::Action& a : s.actions[p]) {
      if (a.kind == schedule::ActionKind::kSendF || a.kind == schedule::ActionKind::kSendB) ++sends;
    }
    return sends * N * kWidth * 4;
  };
  // During the schedule (summary.json's pp_sent_bytes) the head's rank also sends the table's
  // gradient; after the update rank 0 sends the table (its whole step: metrics.jsonl).
  for (int p = 0; p < l.pp; ++p) {
    EXPECT_EQ(summary["pipeline"]["pp_sent_bytes"][p].get<int64_t>(),
              sends_of(p) + (p == l.pp - 1 ? table : 0))
        << "rank " << p;
  }
  for (const auto& m : read_metrics(run)) {
    EXPECT_EQ(m["comm"]["pp"]["send"].get<double>(), static_cast<double>(sends_of(0) + table))
        << m.dump();
  }
  // Parameters per pipeline rank: plan/'s count (the copy on the head's rank included), fp32.
  ModelConfig mc;
  mc.vocab_size = 64, mc.d_model = kWidth, mc.n_layers = kLayers, mc.n_heads = 4, mc.n_kv_heads = 2,
  mc.ffn_hidden = 64, mc.seq_len = kSeq, mc.tied_embeddings = true;
  mc.validate();
  plan::Layout pl;
  pl.pp = l.pp, pl.dp = l.dp, pl.zero = l.dp > 1 ? 1 : 0, pl.chunks = l.chunks;
  pl.schedule = schedule::parse_schedule_kind(l.schedule);
  const plan::PipelineShape shape = plan::pipeline_shape(mc.spec(), pl);
  const double last = plan::params_of_rank(mc.spec(), pl, shape, l.pp - 1).dense;
  EXPECT_EQ(summary["memory_per_rank"][(l.pp - 1) * l.dp]["current"]["parameters"].get<double>(),
            last * 4);
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, TiedPipeline,
    ::testing::Values(TiedLayout{2, 1, "1f1b", 1, "1f1b_pp2"}, TiedLayout{2, 1, "gpipe", 1, "gpipe_pp2"},
                      TiedLayout{2, 1, "zb-h1", 1, "zbh1_pp2"},
                      TiedLayout{2, 1, "interleaved", 2, "interleaved_pp2"},
                      TiedLayout{4, 1, "1f1b", 1, "1f1b_pp4"},
                      TiedLayout{2, 2, "1f1b", 1, "1f1b_pp2_dp2_zero1"}),
    [](const ::testing::TestParamInfo<TiedLayout>& i) { return i.param.name; });

// ZeRO-2/3 with pipeline parallelism, pp 2 x dp 2 under every schedule family: the one-process
// run (1e-5), gradients (ZeRO-2) or gradients and parameters (ZeRO-3) sharded over each stage's
// dp group with plan/'s bytes of memory, and the dp group's bytes on pipeline rank 0 exactly what
// plan/'s step model assumes: one reduce-scatter of each chunk's gradients per micro-batch it
// runs, and an all-gather of the updated parameters once per step (ZeRO-2) or of each chunk's
// parameters for every forward and backward pass (ZeRO-3).
struct ZeroLayout {
  int zero;
  std::string schedule;
  int chunks;
  std::string name;
};
void PrintTo(const ZeroLayout& l, std::ostream* os) {
  *os << l.name;
}
class ZeroPipeline : public ::testing::TestWithParam<ZeroLayout> {};

TEST_P(ZeroPipeline, TrainsTheOneProcessRunWithShardedStates) {
  const ZeroLayout l = GetParam();
  const std::string ref = shared_run(kEnv + flags());
  const std::string run = fresh_dir("pipeline_zero_" + l.name);
  const auto r = run_trillion(
      kEnv + "launch -n 4 -- " + flags() + " --run-dir " + run +
      " --set parallel.pp=2 --set parallel.dp=2 --set parallel.zero=" + std::to_string(l.zero) +
      " --set parallel.schedule=" + l.schedule +
      (l.chunks > 1 ? " --set parallel.chunks=" + std::to_string(l.chunks) : std::string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto cmp = run_trillion("compare " + ref + " " + run + " --tol 1e-5");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;

  ModelConfig mc;
  mc.vocab_size = 64, mc.d_model = kWidth, mc.n_layers = kLayers, mc.n_heads = 4, mc.n_kv_heads = 2,
  mc.ffn_hidden = 64, mc.seq_len = kSeq;
  mc.validate();
  plan::Layout pl;
  pl.pp = 2, pl.dp = 2, pl.zero = l.zero, pl.chunks = l.chunks;
  pl.schedule = schedule::parse_schedule_kind(l.schedule);
  const plan::PipelineShape shape = plan::pipeline_shape(mc.spec(), pl);
  const auto summary = read_json(run + "/summary.json");
  for (int p = 0; p < 2; ++p) {
    const double held = plan::params_of_rank(mc.spec(), pl, shape, p).dense;
    const plan::ModelStates f = plan::zero_model_states(held, l.zero, 2, 4, 4, 8);
    for (int d = 0; d < 2; ++d) {
      const auto& mem = summary["memory_per_rank"][p * 2 + d]["current"];
      EXPECT_EQ(mem["gradients"].get<double>(), f.gradients) << "pipeline rank " << p;
      EXPECT_EQ(mem["parameters"].get<double>(), f.parameters) << "pipeline rank " << p;
      EXPECT_EQ(mem["optimizer"].get<double>(), f.optimizer) << "pipeline rank " << p;
    }
  }
  // Pipeline rank 0's chunks: passes per step and elements each, from the schedule and plan/.
  const schedule::Schedule s = schedule::generate_schedule(pl.schedule, 2, kMicro,
                                                           l.schedule == "dualpipe" ? 2 : l.chunks);
  const double half = 0.5 * 4;  // (n - 1) / n of each fp32 element over dp 2
  double reduce_scatter = 0, per_pass = 0;
  for (int c = 0; c < s.num_chunks; ++c) {
    int64_t passes = 0;
    for (const schedule::Action& a : s.actions[0]) {
      if (a.chunk == c && a.kind == schedule::ActionKind::kBackwardWeight) ++passes;
    }
    int stage = -1;
    for (const auto& path : s.paths) {
      for (int st = 0; st < static_cast<int>(path.size()); ++st) {
        if (path[st].rank == 0 && path[st].chunk == c) stage = st;
      }
    }
    const plan::StageUnits& u = shape.stages[stage];
    double elements = 0;
    const TensorTable table = plan::parameter_table(mc.spec());
    for (const TensorSpec& t : table.specs()) {
      if (t.unit >= u.first_unit && t.unit <= u.last_unit) elements += t.global_numel();
    }
    reduce_scatter += passes * elements * half;
    per_pass += passes * elements * half;
  }
  const double rank0 = plan::params_of_rank(mc.spec(), pl, shape, 0).dense * half;
  for (const auto& m : read_metrics(run)) {
    const auto& dp = m["comm"]["dp"];
    EXPECT_EQ(dp["reduce_scatter"].get<double>(), reduce_scatter) << m.dump();
    if (l.zero == 2) {
      EXPECT_EQ(dp["all_gather"].get<double>(), rank0) << m.dump();
    }
    // Forward + backward; schedules with split B/W passes (zb-h1, DualPipe) skip gathering the
    // embedding for its W (it reads no parameter: docs/engine.md's gradients_only).
    if (l.zero == 3 && l.schedule != "zb-h1" && l.schedule != "dualpipe") {
      EXPECT_EQ(dp["all_gather"].get<double>(), 2 * per_pass) << m.dump();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, ZeroPipeline,
                         ::testing::Values(ZeroLayout{2, "1f1b", 1, "zero2_1f1b"},
                                           ZeroLayout{3, "1f1b", 1, "zero3_1f1b"},
                                           ZeroLayout{2, "zb-h1", 1, "zero2_zbh1"},
                                           ZeroLayout{3, "zb-h1", 1, "zero3_zbh1"},
                                           ZeroLayout{2, "interleaved", 2, "zero2_interleaved"},
                                           ZeroLayout{3, "interleaved", 2, "zero3_interleaved"},
                                           ZeroLayout{2, "dualpipe", 2, "zero2_dualpipe"},
                                           ZeroLayout{3, "dualpipe", 2, "zero3_dualpipe"}),
                         [](const ::testing::TestParamInfo<ZeroLayout>& i) {
                           return i.param.name;
                         });

// Three stages of an 8-layer model (3 + 3 + 2 layers: uneven, and stated in events.log) with a
// clip far below the gradient norm, so every step is clipped: the norm must be the one over all
// stages (a per-stage norm would scale each stage differently and break parity).
TEST(PipelineLayout, UnevenSplitAndClippingOverAllStagesMatchOneProcess) {
  const double clip = 0.02;  // the norm of these steps is ~0.28: the default 1.0 never binds
  const std::string clip_flag = " --set optim.grad_clip=" + std::to_string(clip);
  const std::string ref = shared_run(kEnv + flags() + clip_flag);
  const std::string run = fresh_dir("pipeline_uneven_clipped");
  const auto r = run_trillion(kEnv + "launch -n 3 -- " + flags() + clip_flag + " --run-dir " + run +
                              " --set parallel.pp=3 --set parallel.schedule=zb-h1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto cmp = run_trillion("compare " + ref + " " + run + " --tol 1e-5");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
  const auto ref_lines = read_metrics(ref), run_lines = read_metrics(run);
  ASSERT_EQ(ref_lines.size(), 2u);
  ASSERT_EQ(run_lines.size(), ref_lines.size());
  for (size_t i = 0; i < ref_lines.size(); ++i) {
    const double want = ref_lines[i]["grad_norm"].get<double>();
    EXPECT_GT(want, 5 * clip) << "the clip must bind for this test to mean anything";
    EXPECT_NEAR(run_lines[i]["grad_norm"].get<double>(), want, 1e-5 * want) << "step " << i + 1;
  }
  std::ifstream log(run + "/events.log");
  const std::string events((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(events.find("pipeline: zb-h1, 3 rank(s) x 1 chunk(s); stage 0 (rank 0 chunk 0): "
                        "embedding + layers 0-2; stage 1 (rank 1 chunk 0): layers 3-5; stage 2 "
                        "(rank 2 chunk 0): layers 6-7 + head"),
            std::string::npos)
      << events;
}

// parallel.partition: the stages hold the layer counts given (the planner's explicit splits,
// `plan --layout partition=2/6`), train the one-process run, and every rank's activation bytes
// are plan/'s for that split (summary.json's predicted == measured peak; the memory check).
TEST(PipelineLayout, ExplicitPartitionMatchesOneProcessAndThePlannedMemory) {
  const std::string ref = shared_run(kEnv + flags());
  const struct {
    std::string set, split;
  } cases[] = {
      {"--set parallel.pp=2 --set parallel.partition=2/6",
       "stage 0 (rank 0 chunk 0): embedding + layers 0-1; stage 1 (rank 1 chunk 0): layers 2-7 + "
       "head"},
      {"--set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.chunks=2 --set "
       "parallel.partition=1/3/3/1",
       "stage 0 (rank 0 chunk 0): embedding + layers 0-0; stage 1 (rank 1 chunk 0): layers 1-3; "
       "stage 2 (rank 0 chunk 1): layers 4-6; stage 3 (rank 1 chunk 1): layers 7-7 + head"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.set);
    const std::string run = fresh_dir("pipeline_explicit_partition");
    const auto r =
        run_trillion(kEnv + "launch -n 2 -- " + flags() + " --run-dir " + run + " " + c.set);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto cmp = run_trillion("compare " + ref + " " + run + " --tol 1e-5");
    EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
    std::ifstream log(run + "/events.log");
    const std::string events((std::istreambuf_iterator<char>(log)),
                             std::istreambuf_iterator<char>());
    EXPECT_NE(events.find(c.split), std::string::npos) << events;
    const auto summary = read_json(run + "/summary.json");
    ASSERT_EQ(summary["memory_per_rank"].size(), 2u);
    std::vector<double> params;
    for (const auto& rank : summary["memory_per_rank"]) {
      EXPECT_EQ(rank["predicted"]["activations"].get<double>(),
                rank["peak"]["activations"].get<double>());
      params.push_back(rank["peak"]["parameters"].get<double>());
    }
    // 2 + embedding against 6 + head layers (the even split would hold 4 + 4).
    if (c.set.find("2/6") != std::string::npos) {
      EXPECT_LT(params[0], params[1]);
    }
  }
}

TEST(PipelineLayout, ImpossibleLayoutsAreRefusedByName) {
  const std::string dir = fresh_dir("pipeline_refused");
  const std::pair<std::string, std::string> cases[] = {
      {"--set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.chunks=2 --set "
       "train.grad_accum=2",
       "parallel.pp = 2 x 2 chunk(s) = 4 stages for model.n_layers = 2"},
      {"--set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.chunks=2 --set "
       "model.n_layers=4 --set train.grad_accum=3",
       "interleaved needs micro-batches (3) to be a multiple of stages (2)"},
      {"--set parallel.pp=2 --set parallel.schedule=dualpipe --set train.grad_accum=2",
       "dualpipe needs an even number of stages and an even number of micro-batches >= 2 x"},
      {"--set parallel.pp=2 --set model.n_layers=4 --set train.grad_accum=2 --set "
       "parallel.partition=1/1/2",
       "parallel.partition gives 3 stages; this pipeline has 2"},
      {"--set parallel.pp=2 --set model.n_layers=4 --set train.grad_accum=2 --set "
       "parallel.partition=1/2",
       "2 stages hold 3 layers in all; the model has 4"},
      {"--set parallel.pp=2 --set parallel.partition=1+1", "parallel.partition = \"1+1\": use"},
  };
  for (const auto& [set, expect] : cases) {
    const auto r = run_trillion(kEnv + "launch -n 2 -- train " + config_path("tiny.toml") +
                                " --quiet --run-dir " + dir + " " + set);
    EXPECT_EQ(r.exit_code, 2) << set << "\n" << r.output;
    EXPECT_NE(r.output.find(expect), std::string::npos) << set << "\n" << r.output;
  }
}

TEST(PipelineLayout, ARankKilledMidPipelineEndsTheJobInOneLine) {
  const std::string dir = fresh_dir("pipeline_killed");
  ::setenv("TRILLION_KILL_RANK_AT_STEP", "1:3", 1);
  const auto r = run_trillion(kEnv + "launch -n 2 -- " + flags() + " --run-dir " + dir +
                              " --set train.steps=6 --set parallel.pp=2");
  ::unsetenv("TRILLION_KILL_RANK_AT_STEP");
  EXPECT_EQ(r.exit_code, 128 + 9) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_EQ(r.output.rfind("trillion launch: rank 1 was killed by signal 9", 0), 0u) << r.output;
}

}  // namespace
}  // namespace trillion
