// The pipeline executor on one rank: every schedule kind that runs on one rank (GPipe, 1F1B,
// ZB-H1, ZB-H2, interleaved with two or four chunks = two or four stages in one process), with
// fused or split backward and every ZeRO stage of a group of one, trains bitwise the run of the
// one-stage 1F1B schedule; a hand-written list that defers every W (F0 F1 B0 B1 W0 W1) does too;
// slots come from the schedule, and a schedule that defers W on unsplit stages is refused.
#include "parallel/pipeline/executor.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "plan/parameter_table.h"
#include "schedule/generators.h"
#include "schedule/simulator.h"
#include "train/run_config.h"
#include "train/step_runner.h"

namespace trillion {
namespace {

RunConfig tiny(std::vector<std::string> overrides) {
  overrides.push_back("train.grad_accum=4");
  overrides.push_back("model.n_layers=4");
  overrides.push_back("parallel.bucket_mb=0.02");
  return load_run_config(std::string(TRILLION_SOURCE_DIR) + "/configs/tiny.toml", overrides);
}

struct TrainedRun {
  std::vector<double> losses;
  std::vector<float> weights;
  int stages = 0;
  std::vector<int> slots;
};

TrainedRun train_steps(const RunConfig& c, int steps) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  StepRunner runner(c, *be, tracker);
  runner.init_parameters(c.train.seed);
  TrainedRun r;
  r.stages = runner.num_stages();
  for (int s = 0; s < r.stages; ++s) r.slots.push_back(runner.stage(s).slots());
  const int64_t n = c.train.micro_batch * c.model.seq_len;
  for (int s = 0; s < steps; ++s) {
    auto batch = [&](int64_t step, int64_t micro, int32_t* tok, int32_t* tgt) {
      for (int64_t i = 0; i < n; ++i) {
        tok[i] = static_cast<int32_t>((step * 7 + micro * 13 + i * 5) % c.model.vocab_size);
        tgt[i] = static_cast<int32_t>((step + micro + i * 11) % c.model.vocab_size);
      }
    };
    r.losses.push_back(runner.step(s, batch).loss);
  }
  Buffer full(tracker, MemoryCategory::workspace, DType::f32, runner.table().total_elements());
  runner.data_parallel().gather_parameters(full);
  const auto* f = static_cast<const float*>(full.raw());
  r.weights.assign(f, f + full.count());
  return r;
}

TEST(Executor, EveryOneRankScheduleTrainsTheOneStageRunBitwise) {
  // The reference of each ZeRO stage is its one-stage 1F1B run (stages 2-3 reduce every
  // micro-batch, so they agree with stage 0 only to rounding; see engine_test.cpp).
  std::map<int, TrainedRun> refs;
  for (int zero : {0, 2, 3}) {
    refs[zero] = train_steps(tiny({"parallel.zero=" + std::to_string(zero)}), 2);
    ASSERT_EQ(refs[zero].stages, 1);
    EXPECT_EQ(refs[zero].slots, std::vector<int>{1});
  }
  struct Case {
    std::vector<std::string> set;
    int stages;
    std::vector<int> slots;  // interleaved warms chunk 0 up with one extra forward per chunk
    int zero = 0;
  };
  const std::vector<Case> cases = {
      {{"parallel.schedule=\"gpipe\""}, 1, {4}},
      {{"parallel.schedule=\"zb-h1\""}, 1, {1}},
      {{"parallel.schedule=\"zb-h2\"", "parallel.split_backward=true"}, 1, {1}},
      {{"parallel.split_backward=true"}, 1, {1}},
      {{"parallel.schedule=\"interleaved\"", "parallel.chunks=2"}, 2, {2, 1}},
      {{"parallel.schedule=\"interleaved\"", "parallel.chunks=4", "parallel.split_backward=true"},
       4,
       {2, 2, 1, 1}},
      {{"parallel.schedule=\"gpipe\"", "parallel.zero=3", "parallel.split_backward=true"},
       1,
       {4},
       3},
      {{"parallel.schedule=\"interleaved\"", "parallel.chunks=2", "parallel.zero=2"}, 2, {2, 1}, 2},
  };
  for (const Case& k : cases) {
    const TrainedRun got = train_steps(tiny(k.set), 2);
    const TrainedRun& ref = refs[k.zero];
    std::string what;
    for (const auto& s : k.set) what += s + " ";
    EXPECT_EQ(got.stages, k.stages) << what;
    EXPECT_EQ(got.slots, k.slots) << what;
    EXPECT_EQ(got.losses, ref.losses) << what;
    ASSERT_EQ(got.weights.size(), ref.weights.size());
    EXPECT_EQ(std::memcmp(got.weights.data(), ref.weights.data(), ref.weights.size() * 4), 0)
        << what;
  }
}

// One stage, a list that runs every B before any W: the zero-bubble pattern of deferring W.
schedule::Schedule deferred_w(int m) {
  schedule::Schedule s;
  s.kind = schedule::ScheduleKind::kZbH1;
  s.num_ranks = 1;
  s.num_microbatches = m;
  s.paths = {{{0, 0}}};
  s.path_of.assign(m, 0);
  s.actions.resize(1);
  using K = schedule::ActionKind;
  for (K kind : {K::kForward, K::kBackwardInput, K::kBackwardWeight})
    for (int mb = 0; mb < m; ++mb) s.actions[0].push_back({0, kind, mb, 0, 0});
  return s;
}

TEST(Executor, DeferredWeightGradientsNeedSplitStagesAndMatchFused) {
  const RunConfig c = tiny({});
  const ModelConfig& mc = c.model;
  const int m = 3;
  const schedule::Schedule s = deferred_w(m);
  ASSERT_TRUE(schedule::validate(s).empty());
  EXPECT_EQ(schedule::inflight_slots(s, 0), std::vector<int>{m});
  const int64_t n = 2 * mc.seq_len;
  auto batches = [&](int64_t micro, int32_t* tok, int32_t* tgt) {
    for (int64_t i = 0; i < n; ++i) {
      tok[i] = static_cast<int32_t>((micro * 3 + i * 7) % mc.vocab_size);
      tgt[i] = static_cast<int32_t>((micro + i * 5) % mc.vocab_size);
    }
  };
  auto run = [&](bool split, const schedule::Schedule& sched, std::vector<double>* losses) {
    MemoryTracker tracker;
    auto be = make_cpu_backend(tracker);
    const ParallelContext ctx = ParallelContext::single(mc, 2, mc.seq_len);
    ParameterSet params(plan::parameter_table(mc.spec()), {}, mc.dtype, *be, tracker);
    const int last = plan::head_unit(mc.spec());
    StageModel stage(mc, ctx, params, {0, last}, {m, split}, *be, tracker);
    params.init(3);
    params.zero_grad();
    parallel::PipelineExecutor ex(sched, 0, {&stage}, *be, tracker);
    *losses = ex.run(batches, 1.0 / (n * m));
    const char* g = static_cast<const char*>(params.gradients().raw());
    return std::vector<char>(g, g + params.gradients().bytes());
  };
  std::vector<double> deferred_losses, fused_losses;
  const auto deferred = run(true, s, &deferred_losses);
  const schedule::Schedule gpipe =
      schedule::generate_schedule(schedule::ScheduleKind::kGPipe, 1, m);
  const auto fused = run(false, gpipe, &fused_losses);
  EXPECT_EQ(deferred_losses, fused_losses);
  EXPECT_EQ(deferred, fused);
  try {
    std::vector<double> unused;
    run(false, s, &unused);
    FAIL() << "deferred W on an unsplit stage must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.split_backward = true"), std::string::npos)
        << e.what();
  }
}

TEST(Executor, LayoutsThisBuildCannotTrainAreRefusedByName) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  try {
    StepRunner r(tiny({"parallel.cp=2"}), *be, tracker);
    FAIL();
  } catch (const Error& e) {
    // cp trains (docs/context-parallel.md) but needs its process group: one process is refused.
    EXPECT_NE(std::string(e.what()).find("parallel.cp = 2 but the cp group has 1 process(es)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(StepRunner(tiny({"parallel.chunks=2"}), *be, tracker), Error);  // 1f1b, 2 chunks
  EXPECT_THROW(
      StepRunner(tiny({"parallel.schedule=\"interleaved\"", "parallel.chunks=5"}), *be, tracker),
      Error);  // 5 stages for 4 layers
}

}  // namespace
}  // namespace trillion
