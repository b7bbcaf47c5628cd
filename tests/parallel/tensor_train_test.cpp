// Tensor + sequence parallelism in whole runs under `trillion launch`: tp in {2, 4} x sp off/on,
// tied and untied heads, recompute and split backward, LAMB (its per-tensor norms over tp), and
// compositions with dp (ZeRO 1, 3) and pp (1f1b, zb-h1), up to tp 2 x pp 2 x dp 2 on 8 ranks,
// each trains the one-process run of the same config (configs/tiny.toml with 4 kv heads so tp 4
// divides them, 2 micro-batches, 2 steps, a clip that binds): losses and final weights within
// 1e-5 (`trillion compare`; LAMB 1e-6) and the clipped gradient norm within 1e-6 relative (it
// must count each parameter once across tp, pp and dp). The bytes rank 0 sent over its tp group
// each step (metrics.jsonl comm.tp) equal the formula: per micro-batch and layer 4 [N, C]
// all-reduces (SP: 4 all-gathers + 4 reduce-scatters), the embedding's and the head's one each,
// the cross-entropy's 3 doubles per token row, and per step the norm weights' gradients (SP) and
// the gradient norm. Every rank's activation bytes equal plan/'s formula with tp and sp (and
// each recompute policy), as summary.json reports them beside the measured ones. Layouts tp
// cannot run are refused by name before any allocation; a tp 2 checkpoint resumes under tp 4.
#include <gtest/gtest.h>

#include <fstream>

#include "../train/cli_util.h"
#include "model/config.h"
#include "plan/activation_memory.h"
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

constexpr int kLayers = 2, kMicro = 2, kBatch = 4, kSeq = 32, kWidth = 32;
constexpr double kClip = 0.5;  // the first step's norm is ~0.52: the clip binds

// shared: flags of both the reference and the run (a tied head, another optimizer).
std::string flags(const std::string& shared) {
  return "train " + config_path("tiny.toml") +
         " --quiet --set train.steps=2 --set model.n_kv_heads=4 --set train.grad_accum=" +
         std::to_string(kMicro) + " --set optim.grad_clip=0.5" + shared;
}

double sent(const nlohmann::json& group, const char* kind) {
  return group.contains(kind) ? group[kind].get<double>() : 0.0;
}

struct Layout {
  int tp;
  bool sp;
  int dp = 1, zero = 0, pp = 1;
  std::string schedule = "1f1b";
  std::string extra;   // more --set flags of the run (recompute, split backward)
  std::string shared;  // --set flags of the run and its reference (tied head, LAMB)
  std::string name;
  // LAMB: its trust ratios without the sum over tp shards are off by only ~4e-6 after these
  // steps (measured), so the comparison is tighter (the correct run is within 6e-8).
  double tol = 1e-5;
};
void PrintTo(const Layout& l, std::ostream* os) {
  *os << l.name;
}

class TensorParallelRun : public ::testing::TestWithParam<Layout> {};

TEST_P(TensorParallelRun, TrainsTheOneProcessRunWithTheFormulaBytes) {
  const Layout l = GetParam();
  const std::string ref = shared_run(kEnv + flags(l.shared));
  const std::string run = fresh_dir("tensor_" + l.name);
  const std::string layout = " --set parallel.tp=" + std::to_string(l.tp) +
                             " --set parallel.sp=" + (l.sp ? "true" : "false") +
                             " --set parallel.dp=" + std::to_string(l.dp) +
                             " --set parallel.zero=" + std::to_string(l.zero) +
                             " --set parallel.pp=" + std::to_string(l.pp) +
                             " --set parallel.schedule=" + l.schedule + l.extra;
  const int world = l.tp * l.dp * l.pp;
  const auto r = run_trillion(kEnv + "launch -n " + std::to_string(world) + " -- " +
                              flags(l.shared) + " --run-dir " + run + layout);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto cmp = run_trillion("compare " + ref + " " + run + " --tol " + std::to_string(l.tol));
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;

  const auto summary = read_json(run + "/summary.json");
  EXPECT_EQ(summary["parallel"]["tp"], l.tp);
  EXPECT_EQ(summary["parallel"]["sp"], l.sp);
  const auto ref_lines = read_metrics(ref), run_lines = read_metrics(run);
  ASSERT_EQ(run_lines.size(), 2u);
  ASSERT_EQ(ref_lines.size(), run_lines.size());
  EXPECT_GT(ref_lines[0]["grad_norm"].get<double>(), kClip);
  for (size_t i = 0; i < ref_lines.size(); ++i) {
    const double want = ref_lines[i]["grad_norm"].get<double>();
    EXPECT_NEAR(run_lines[i]["grad_norm"].get<double>(), want, 1e-6 * want) << "step " << i + 1;
    EXPECT_EQ(run_lines[i]["loss"].get<double>(), run_lines[i]["loss"].get<double>());
  }

  // Every rank's activation bytes == plan/'s formula for its stage, tp and sp (computed here from
  // the schedule's in-flight slots, and reported by the run beside the measured ones).
  ModelConfig mc;
  mc.vocab_size = 64, mc.d_model = kWidth, mc.n_layers = kLayers, mc.n_heads = 4, mc.n_kv_heads = 4,
  mc.ffn_hidden = 64, mc.seq_len = kSeq;
  for (const char* policy : {"full", "selective"}) {
    if (l.extra.find(std::string("recompute=") + policy) != std::string::npos) {
      mc.set_recompute(policy);
    }
  }
  mc.validate();
  const schedule::Schedule sched =
      schedule::generate_schedule(schedule::parse_schedule_kind(l.schedule), l.pp, kMicro, 1);
  const auto partition = plan::partition_stages(kLayers, sched.num_stages(0));
  for (int rank = 0; rank < world; ++rank) {
    const int pipeline_rank = rank / (l.tp * l.dp);  // the mesh: tp fastest, then dp, then pp
    const plan::StageUnits& u = partition[pipeline_rank];
    const int64_t first = u.first_unit == 0 ? 0 : u.first_unit - 1;
    const int64_t last = std::min<int64_t>(u.last_unit, kLayers);
    const int slots = schedule::inflight_slots(sched, pipeline_rank)[0];
    const int64_t predicted =
        plan::engine_activation_bytes(mc.spec(), kBatch / l.dp, kSeq, mc.activation_policy(), 4, 4,
                                      {first, last - first, u.last_unit == kLayers + 1}, slots,
                                      {l.tp, l.sp, 1})
            .total();
    const auto& m = summary["memory_per_rank"][rank];
    EXPECT_EQ(m["current"]["activations"].get<int64_t>(), predicted) << "rank " << rank;
    EXPECT_EQ(m["predicted"]["activations"].get<int64_t>(), predicted) << "rank " << rank;
  }

  // Rank 0's bytes over tp: pipeline rank 0 holds the embedding and layers [0, L/pp), the head
  // too when pp = 1. Ring volumes: an all-reduce of b bytes sends 2 (p-1)/p b, an all-gather or
  // reduce-scatter (p-1)/p of the whole tensor.
  if (l.extra.find("recompute") != std::string::npos) return;  // recompute re-runs forward's
  const double p = l.tp, ring = (p - 1) / p;
  const double N = static_cast<double>(kBatch / l.dp * kSeq), NC = N * kWidth * 4;
  const int layers = kLayers / l.pp;
  const bool head = l.pp == 1;
  const double per_micro_tensors = 4.0 * layers + 1 + (head ? 1 : 0);  // [N, C] each way
  const double ce = head ? 2 * ring * 3 * N * 8 : 0.0;  // max, then sum-exp + target logit
  const double norm_scalar = 2 * ring * 8;              // the gradient norm's sum over tp
  for (const auto& m : run_lines) {
    const auto& tp = m["comm"]["tp"];
    if (l.sp) {
      EXPECT_EQ(sent(tp, "all_gather"), kMicro * per_micro_tensors * ring * NC) << m.dump();
      EXPECT_EQ(sent(tp, "reduce_scatter"), kMicro * per_micro_tensors * ring * NC) << m.dump();
    } else {
      EXPECT_EQ(sent(tp, "all_gather"), 0.0) << m.dump();
      EXPECT_EQ(sent(tp, "reduce_scatter"), 0.0) << m.dump();
    }
    if (l.dp > 1 && l.zero > 0 && l.sp) continue;  // ZeRO: the norm gradients of the dp shard
    // SP: the norm weights' gradients (2 per layer, the final norm with the head) in f64.
    const double norms = l.sp ? 2 * ring * (2.0 * layers + (head ? 1 : 0)) * kWidth * 8 : 0.0;
    const double layer_reduces = l.sp ? 0.0 : kMicro * per_micro_tensors * 2 * ring * NC;
    // LAMB: its per-tensor sums (w and update squares, 2 f64 per tensor of the rank's table:
    // the embedding, 9 per layer, the final norm and an untied head).
    const bool tied = l.shared.find("tied") != std::string::npos;
    const double specs = 1 + 9.0 * layers + (head ? (tied ? 1 : 2) : 0);
    const double lamb = l.shared.find("lamb") != std::string::npos ? 2 * ring * 8 * 2 * specs : 0;
    EXPECT_EQ(sent(tp, "all_reduce"), layer_reduces + kMicro * ce + norms + norm_scalar + lamb)
        << m.dump();
  }
}

std::vector<Layout> layouts() {
  std::vector<Layout> all;
  for (int tp : {2, 4}) {
    for (bool sp : {false, true}) {
      all.push_back(
          {tp, sp, 1, 0, 1, "1f1b", "", "", "tp" + std::to_string(tp) + (sp ? "_sp" : "_nosp")});
    }
  }
  const std::string tied = " --set model.tied_embeddings=true";
  const std::string lamb = " --set optim.name=lamb";
  all.push_back({2, true, 1, 0, 1, "1f1b", "", tied, "tp2_sp_tied"});
  all.push_back({2, false, 1, 0, 1, "1f1b", "", tied, "tp2_nosp_tied"});
  all.push_back({2, true, 1, 0, 1, "1f1b", "", lamb, "tp2_sp_lamb", 1e-6});
  all.push_back({2, true, 2, 1, 1, "1f1b", "", lamb, "tp2_dp2_zero1_sp_lamb", 1e-6});
  all.push_back({2, true, 1, 0, 1, "1f1b", " --set model.recompute=full", "", "tp2_sp_full"});
  all.push_back(
      {2, true, 1, 0, 1, "1f1b", " --set model.recompute=selective", "", "tp2_sp_selective"});
  all.push_back(
      {2, true, 1, 0, 1, "1f1b", " --set parallel.split_backward=true", "", "tp2_sp_split"});
  for (int zero : {1, 3}) {
    for (bool sp : {false, true}) {
      all.push_back({2, sp, 2, zero, 1, "1f1b", "", "",
                     "tp2_dp2_zero" + std::to_string(zero) + (sp ? "_sp" : "_nosp")});
    }
  }
  for (const char* s : {"1f1b", "zb-h1"}) {
    const std::string n = std::string(s) == "1f1b" ? "1f1b" : "zbh1";
    all.push_back({2, true, 1, 0, 2, s, "", "", "tp2_pp2_" + n});
    all.push_back({2, true, 2, 1, 2, s, "", "", "tp2_pp2_dp2_" + n});
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Layouts, TensorParallelRun, ::testing::ValuesIn(layouts()),
                         [](const ::testing::TestParamInfo<Layout>& i) { return i.param.name; });

// A checkpoint written by tp 2 (SP on) resumes under tp 4 (SP off): the parameters and Adam
// moments are assembled into the one-process layout and cut again, so the 4 steps match the
// one-process run.
// Multi-head latent attention (model/mla.h) at tp 2, SP off and on: heads sharded, the replicated
// down-projections' and latent norms' gradients summed over tp by the step (with or without SP).
// Losses and final weights within 1e-5 of the one-process run, the clipped gradient norm within
// 1e-6, and every rank's activation bytes == plan/'s formula (as summary.json reports them).
TEST(TensorParallelLayout, MlaTrainsTheOneProcessRun) {
  const std::string mla =
      " --set model.attention=mla --set model.q_lora_rank=16 --set model.kv_lora_rank=16"
      " --set model.qk_nope_head_dim=4 --set model.qk_rope_head_dim=4 --set model.v_head_dim=6";
  const std::string ref = shared_run(kEnv + flags(mla));
  for (bool sp : {false, true}) {
    const std::string run = fresh_dir(std::string("tensor_mla_") + (sp ? "sp" : "nosp"));
    const auto r = run_trillion(kEnv + "launch -n 2 -- " + flags(mla) + " --run-dir " + run +
                                " --set parallel.tp=2 --set parallel.sp=" + (sp ? "true" : "false"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto cmp = run_trillion("compare " + ref + " " + run + " --tol 1e-5");
    EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
    const auto ref_lines = read_metrics(ref), run_lines = read_metrics(run);
    ASSERT_EQ(run_lines.size(), ref_lines.size());
    for (size_t i = 0; i < ref_lines.size(); ++i) {
      const double want = ref_lines[i]["grad_norm"].get<double>();
      EXPECT_NEAR(run_lines[i]["grad_norm"].get<double>(), want, 1e-6 * want) << "step " << i + 1;
    }
    const auto summary = read_json(run + "/summary.json");
    for (int rank = 0; rank < 2; ++rank) {
      const auto& m = summary["memory_per_rank"][rank];
      EXPECT_EQ(m["current"]["activations"].get<int64_t>(),
                m["predicted"]["activations"].get<int64_t>())
          << "rank " << rank << " sp " << sp;
    }
  }
}

TEST(TensorParallelLayout, ACheckpointOfOneTpLayoutResumesUnderAnother) {
  const std::string args =
      "train " + config_path("tiny.toml") + " --quiet --set train.steps=4 --set model.n_kv_heads=4";
  const std::string ref = shared_run(kEnv + args);
  const std::string run = fresh_dir("tensor_resume");
  const auto first = run_trillion(kEnv + "launch -n 2 -- " + args + " --run-dir " + run +
                                  " --set parallel.tp=2 --stop-after 2");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(read_metrics(run).size(), 2u);
  const auto second = run_trillion(kEnv + "launch -n 4 -- " + args + " --run-dir " + run +
                                   " --set parallel.tp=4 --set parallel.sp=false --resume");
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_EQ(read_json(run + "/summary.json")["parallel"]["tp"], 4);
  const auto cmp = run_trillion("compare " + ref + " " + run + " --tol 1e-5");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
}

TEST(TensorParallelLayout, ImpossibleLayoutsAreRefusedByName) {
  const std::string dir = fresh_dir("tensor_refused");
  const std::pair<std::string, std::string> cases[] = {
      {"--set parallel.tp=4", "parallel.tp = 4 does not divide model.n_kv_heads = 2"},
      {"--set parallel.tp=2 --set model.vocab_size=63 --set data.vocab=63",
       "parallel.tp = 2 does not divide model.vocab_size = 63; pad the vocabulary"},
      {"--set parallel.tp=2 --set train.micro_batch=1 --set model.seq_len=31",
       "parallel.sp = true with parallel.tp = 2: sequence parallelism splits each rank's"},
      {"--set parallel.tp=2 --set parallel.sp=false --set model.n_routed_experts=4 --set "
       "model.top_k=2 --set model.expert_ffn=32",
       "parallel.tp = 2 with parallel.sp = false and MoE layers"},
      {"--set parallel.tp=2 --set parallel.expert_tp=2 --set model.n_routed_experts=4 --set "
       "model.top_k=2 --set model.expert_ffn=31",
       "parallel.expert_tp = 2 does not divide model.expert_ffn = 31"},
      {"--set parallel.tp=2 --set parallel.expert_tp=4 --set model.n_routed_experts=4 --set "
       "model.top_k=2 --set model.expert_ffn=32",
       "parallel.expert_tp = 4: expected 1 (whole experts on each tp rank) or parallel.tp = 2"},
      {"--set parallel.tp=2 --set model.n_routed_experts=3 --set model.top_k=2 --set "
       "model.expert_ffn=32 --set parallel.dp=1",
       "does not divide model.n_routed_experts = 3"},
  };
  for (const auto& [set, expect] : cases) {
    const auto r = run_trillion(kEnv + "launch -n 2 -- train " + config_path("tiny.toml") +
                                " --quiet --run-dir " + dir + " " + set);
    EXPECT_EQ(r.exit_code, 2) << set << "\n" << r.output;
    EXPECT_NE(r.output.find(expect), std::string::npos) << set << "\n" << r.output;
  }
}

}  // namespace
}  // namespace trillion
