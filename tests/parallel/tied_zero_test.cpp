// Tied embeddings and MTP modules across pipeline ranks under ZeRO-2/3 (issue 36): the head's
// rank keeps a copy of the table, sharded over its dp group like the first stage's table (a ZeRO
// bucket of its own on both ends); after the dp reductions the last stage's chunk of the table's
// gradient joins the first stage's, and after the update the first stage's updated chunk
// overwrites the copy's (parallel/pipeline/tied_embedding.h). pp 2 x dp 2 of the tied tiny model
// (8 layers, 8 micro-batches, 2 steps) under ZeRO-2 and ZeRO-3 with 1F1B, interleaved and ZB-H1,
// and of configs/mtp-tiny.toml under ZeRO-3 with 1F1B, train the one-process run (losses and
// weights within 1e-5); TRILLION_CHECK_TIED_COPY=1 makes every run compare the copy with the
// first stage's table bitwise after every step (a difference fails the run); each rank's
// parameter, gradient and optimizer bytes are plan/'s zero_model_states of params_of_rank (the
// copy counted on the head's rank); the pp group carries plan::tied_embedding_elements per end
// per step beside the activations, and pipeline rank 0's dp group the bytes plan/'s step model
// assumes. And a precision recipe (bf16, weights in its store) at pp 2 x dp 2 under ZeRO-1 and
// ZeRO-3, within the recipe's bounds of the one-process bf16 run.
#include <gtest/gtest.h>

#include <cstdlib>

#include "../train/cli_util.h"
#include "model/config.h"
#include "plan/memory.h"
#include "plan/parameter_table.h"
#include "plan/step_model.h"
#include "precision_layouts.h"
#include "schedule/generators.h"
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
constexpr int kLayers = 8, kMicro = 8;

std::string tied_flags() {
  return "train " + config_path("tiny.toml") +
         " --quiet --set train.steps=2 --set model.n_layers=" + std::to_string(kLayers) +
         " --set train.grad_accum=" + std::to_string(kMicro) + " --set model.tied_embeddings=true";
}

std::string mtp_flags() {
  return "train " + config_path("mtp-tiny.toml") +
         " --quiet --set train.steps=3 --set train.grad_accum=4 --set train.log_every=1"
         " --set model.mtp_loss_weight_switch_step=2";
}

struct TiedZeroLayout {
  std::string flags;  // the run, without its layout
  int zero;
  std::string schedule;
  int chunks;
  std::string name;
};
void PrintTo(const TiedZeroLayout& l, std::ostream* os) {
  *os << l.name;
}
class TiedZero : public ::testing::TestWithParam<TiedZeroLayout> {};

TEST_P(TiedZero, TrainsTheOneProcessRunWithTheCopySharded) {
  const TiedZeroLayout l = GetParam();
  const std::string ref = shared_run(kEnv + l.flags);
  const std::string run = fresh_dir("tied_zero_" + l.name);
  ::setenv("TRILLION_CHECK_TIED_COPY", "1", 1);
  const auto r = run_trillion(
      kEnv + "launch -n 4 -- " + l.flags + " --run-dir " + run +
      " --set parallel.pp=2 --set parallel.dp=2 --set parallel.zero=" + std::to_string(l.zero) +
      " --set parallel.schedule=" + l.schedule +
      (l.chunks > 1 ? " --set parallel.chunks=" + std::to_string(l.chunks) : std::string()));
  ::unsetenv("TRILLION_CHECK_TIED_COPY");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto cmp = run_trillion("compare " + ref + " " + run + " --tol 1e-5");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;

  // The run's own resolved config gives the model plan/ sees.
  const RunConfig config = load_run_config(run + "/config.toml", {});
  const plan::ModelSpec spec = config.model.spec();
  plan::Layout pl;
  pl.pp = 2, pl.dp = 2, pl.zero = l.zero, pl.chunks = l.chunks;
  pl.schedule = schedule::parse_schedule_kind(l.schedule);
  const plan::PipelineShape shape = plan::pipeline_shape(spec, pl);
  const auto summary = read_json(run + "/summary.json");
  for (int p = 0; p < 2; ++p) {
    const plan::ModelStates f =
        plan::rank_model_states(plan::params_of_rank(spec, pl, shape, p), l.zero, 2, 2, 4, 4, 8);
    for (int d = 0; d < 2; ++d) {
      const auto& mem = summary["memory_per_rank"][p * 2 + d]["current"];
      EXPECT_EQ(mem["parameters"].get<double>(), f.parameters) << "pipeline rank " << p;
      EXPECT_EQ(mem["gradients"].get<double>(), f.gradients) << "pipeline rank " << p;
      EXPECT_EQ(mem["optimizer"].get<double>(), f.optimizer) << "pipeline rank " << p;
    }
  }

  // pp: the activations and their gradients ([N, C] fp32 per remote boundary and micro-batch)
  // during the schedule; after it the last stage's chunk of the table's gradient, and after the
  // update rank 0's chunk of the table.
  const int micro = static_cast<int>(config.train.grad_accum);
  const schedule::Schedule s = schedule::generate_schedule(pl.schedule, 2, micro, l.chunks);
  const double N = config.train.micro_batch / 2.0 * config.model.seq_len;
  const double C = static_cast<double>(config.model.d_model);
  auto sends_of = [&](int p) {
    double sends = 0;
    for (const schedule::Action& a : s.actions[p]) {
      if (a.kind == schedule::ActionKind::kSendF || a.kind == schedule::ActionKind::kSendB) ++sends;
    }
    return sends * N * C * 4;
  };
  const double chunk = plan::tied_embedding_elements(spec, pl);
  EXPECT_EQ(chunk, config.model.vocab_size * C / 2);
  for (int p = 0; p < 2; ++p) {
    EXPECT_EQ(summary["pipeline"]["pp_sent_bytes"][p].get<double>(), sends_of(p)) << "rank " << p;
  }
  const auto metrics = read_metrics(run);
  ASSERT_FALSE(metrics.empty());
  for (const auto& m : metrics) {
    EXPECT_EQ(m["comm"]["pp"]["send"].get<double>(), sends_of(0) + chunk * 4) << m.dump();
  }

  // dp on pipeline rank 0: one reduce-scatter of each chunk's gradients per micro-batch it runs;
  // ZeRO-2 all-gathers the updated parameters once, ZeRO-3 each chunk's for every forward and
  // backward pass (ZB-H1 skips the embedding's for its W pass).
  const TensorTable table = plan::parameter_table(spec);
  const double half = 0.5 * 4;  // (n - 1) / n of each fp32 element over dp 2
  double per_pass = 0;
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
    for (const TensorSpec& t : table.specs()) {
      if (t.unit >= u.first_unit && t.unit <= u.last_unit) elements += t.global_numel();
    }
    per_pass += passes * elements * half;
  }
  const double rank0 = plan::params_of_rank(spec, pl, shape, 0).dense * half;
  for (const auto& m : metrics) {
    const auto& dp = m["comm"]["dp"];
    EXPECT_EQ(dp["reduce_scatter"].get<double>(), per_pass) << m.dump();
    if (l.zero == 2) {
      EXPECT_EQ(dp["all_gather"].get<double>(), rank0) << m.dump();
    }
    if (l.zero == 3 && l.schedule != "zb-h1") {
      EXPECT_EQ(dp["all_gather"].get<double>(), 2 * per_pass) << m.dump();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, TiedZero,
    ::testing::Values(TiedZeroLayout{tied_flags(), 2, "1f1b", 1, "tied_zero2_1f1b"},
                      TiedZeroLayout{tied_flags(), 3, "1f1b", 1, "tied_zero3_1f1b"},
                      TiedZeroLayout{tied_flags(), 2, "interleaved", 2, "tied_zero2_interleaved"},
                      TiedZeroLayout{tied_flags(), 3, "interleaved", 2, "tied_zero3_interleaved"},
                      TiedZeroLayout{tied_flags(), 3, "zb-h1", 1, "tied_zero3_zbh1"},
                      TiedZeroLayout{mtp_flags(), 3, "1f1b", 1, "mtp_zero3_1f1b"}),
    [](const ::testing::TestParamInfo<TiedZeroLayout>& i) { return i.param.name; });

// A precision recipe whose weights live in its store (fp32 master beside the bf16 copy the model
// reads): the copy's chunk of the master is overwritten before the store rounds and gathers it,
// under ZeRO-1 and ZeRO-3. pp 2 x dp 2 of the tied model with bf16 against the one-process bf16
// run, within the recipe's bounds for a layout that sums gradients in another order
// (precision_layouts.h: dp 2's reduction and the two ends' sum), the copy bitwise the first
// stage's after every step.
TEST(TiedZeroRecipe, Bf16TrainsTheOneProcessBf16RunWithTheCopyInTheStore) {
  const std::string args = tied_flags() + " --set precision.recipe=bf16";
  const std::string ref = shared_run(kEnv + args);
  for (int zero : {1, 3}) {
    const std::string run = fresh_dir("tied_bf16_zero" + std::to_string(zero));
    ::setenv("TRILLION_CHECK_TIED_COPY", "1", 1);
    const auto r = run_trillion(
        kEnv + "launch -n 4 -- " + args + " --run-dir " + run +
        " --set parallel.pp=2 --set parallel.dp=2 --set parallel.zero=" + std::to_string(zero));
    ::unsetenv("TRILLION_CHECK_TIED_COPY");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const testing::RunDiffs d = testing::expect_within_retile_bounds("bf16", ref, run, false);
    testing::report("tied bf16 pp2 dp2 zero" + std::to_string(zero), d);
  }
}

}  // namespace
}  // namespace trillion
