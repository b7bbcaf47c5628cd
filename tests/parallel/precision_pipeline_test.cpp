// Precision recipes under pipeline parallelism (issue 14): pp 2 with 1F1B, interleaved 1F1B (2
// chunks), DualPipe and ZB-H1 trains the one-process run of the same recipe (configs/tiny.toml
// with 4 layers and 4 micro-batches, as interleaved and DualPipe need, 2 steps; one shared
// reference per recipe): bf16 and fp8 at every schedule, mxfp4 and nvfp4 at one each.
// A stage runs whole micro-batches, so every GEMM sees the one-process run's operands and cuts the
// same tiles; the fp4 recipes' stochastic rounding is keyed by (step, micro-batch, layer, pass,
// call in the layer) (model/linear_gemm.h), not by the order the schedule runs the calls in. What
// is left is the order of the fp32 additions into each weight gradient: bitwise where the schedule
// accumulates the micro-batches in the one-process order (1F1B, interleaved, ZB-H1: `trillion
// compare --tol 0`). DualPipe adds the two model copies' gradients in another order: that fp32
// noise (1e-7 relative) flips the rounding of a weight element lying at a bf16/E4M3 midpoint in
// the next step's compute copy, so DualPipe is held to the recipe's bounds (precision_layouts.h;
// measured fp8: max 2.8e-4, RMS 2.4e-6).
#include <gtest/gtest.h>

#include "precision_layouts.h"
#include "train/memory_check.h"
#include "train/run_config.h"

namespace trillion {
namespace {

using testing::compare_runs;
using testing::config_path;
using testing::fresh_dir;
using testing::one_thread_per_rank;
using testing::read_json;
using testing::read_metrics;
using testing::run_trillion;
using testing::shared_run;

const std::string kEnv = one_thread_per_rank();

std::string train_args(const std::string& recipe, const std::string& grad_dtype) {
  return "train " + config_path("tiny.toml") +
         " --quiet --set train.steps=2 --set model.n_layers=4 --set train.grad_accum=4 --set "
         "precision.recipe=" +
         recipe + " --set precision.grad_dtype=" + grad_dtype;
}

struct Layout {
  std::string recipe, schedule;
  bool bitwise;  // else within the recipe's retile bounds
  std::string grad_dtype = "fp32";
};
std::string name_of(const Layout& l) {
  std::string name = l.recipe + "_" + l.schedule + (l.grad_dtype == "bf16" ? "_grad_bf16" : "");
  for (char& c : name) c = c == '-' ? '_' : c;
  return name;
}
void PrintTo(const Layout& l, std::ostream* os) {
  *os << name_of(l);
}

class PrecisionPipeline : public ::testing::TestWithParam<Layout> {};

TEST_P(PrecisionPipeline, TrainsTheOneProcessRunOfTheRecipe) {
  const Layout l = GetParam();
  const std::string ref = shared_run(kEnv + train_args(l.recipe, l.grad_dtype));
  ASSERT_EQ(read_metrics(ref).size(), 2u) << "the one-process reference did not run";
  const std::string run = fresh_dir("precision_pp2_" + name_of(l));
  const std::string layout = " --set parallel.pp=2 --set parallel.schedule=" + l.schedule +
                             (l.schedule == "interleaved" ? " --set parallel.chunks=2" : "") +
                             (l.schedule == "zb-h2" ? " --set parallel.split_backward=true" : "");
  const auto r = run_trillion(kEnv + "launch -n 2 -- " + train_args(l.recipe, l.grad_dtype) +
                              " --run-dir " + run + layout);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  testing::RunDiffs d;
  if (l.bitwise) {
    d = compare_runs(ref, run, 0);
    EXPECT_EQ(d.exit_code, 0) << d.output;
  } else {
    // bf16 gradients: DualPipe's copies each round their half of the micro-batches and then
    // their sum; interleaved folds a bucket spanning both chunks when every unit of it has
    // finished a micro-batch, so other micro-batches' parts share a rounding (precision_layouts.h).
    d = testing::expect_within_retile_bounds(
        l.recipe, ref, run, false, l.grad_dtype == "bf16" ? testing::kBf16GradientRoundings : 1);
  }
  testing::report(l.recipe + " pp2 " + l.schedule + (l.grad_dtype == "bf16" ? " grad bf16" : ""),
                  d);
  if (l.grad_dtype != "bf16") return;
  // bf16 gradients beside the bf16 copy, 2 bytes each, on every rank; the busiest rank's bytes
  // are the engine's memory plan's.
  const RunConfig c = load_run_config(
      config_path("tiny.toml"),
      {"model.n_layers=4", "train.grad_accum=4", "precision.recipe=" + l.recipe,
       "precision.grad_dtype=bf16", "parallel.pp=2", "parallel.schedule=" + l.schedule,
       "parallel.chunks=" + std::string(l.schedule == "interleaved" ? "2" : "1")});
  const MemoryPlan plan = plan_process_memory(c);
  const auto summary = read_json(run + "/summary.json");
  ASSERT_EQ(summary["memory_per_rank"].size(), 2u);
  double most = 0, most_gradients = 0, most_optimizer = 0;
  for (const auto& rank : summary["memory_per_rank"]) {
    const auto& now = rank["current"];
    EXPECT_EQ(now["gradients"].get<double>(), now["parameters"].get<double>()) << rank;
    EXPECT_EQ(now["optimizer"].get<double>(), 6 * now["parameters"].get<double>()) << rank;
    if (now["parameters"].get<double>() > most) {
      most = now["parameters"].get<double>();
      most_gradients = now["gradients"].get<double>();
      most_optimizer = now["optimizer"].get<double>();
    }
  }
  EXPECT_EQ(most, plan.weights);
  EXPECT_EQ(most_gradients, plan.gradients);
  EXPECT_EQ(most_optimizer, plan.optimizer);
}

std::vector<Layout> layouts() {
  std::vector<Layout> all;
  for (const char* recipe : {"bf16", "fp8"}) {
    for (const char* schedule : {"1f1b", "interleaved", "zb-h1"})
      all.push_back({recipe, schedule, true});
    all.push_back({recipe, "dualpipe", false});
  }
  all.push_back({"mxfp4", "zb-h1", true});
  all.push_back({"nvfp4", "1f1b", true});
  // The other schedules, and the fp4 recipes under two chunks per rank: a stage still runs whole
  // micro-batches (same tiles and draws), so bitwise; DualPipe sums its copies after the step.
  all.push_back({"fp8", "gpipe", true});
  all.push_back({"nvfp4", "zb-h2", true});
  all.push_back({"mxfp4", "interleaved", true});
  all.push_back({"nvfp4", "dualpipe", false});
  // bf16 gradients: a stage folds each micro-batch into them in the one-process order except
  // where noted above.
  for (const char* schedule : {"1f1b", "zb-h1"}) all.push_back({"bf16", schedule, true, "bf16"});
  for (const char* schedule : {"interleaved", "dualpipe"})
    all.push_back({"bf16", schedule, false, "bf16"});
  all.push_back({"nvfp4", "zb-h1", true, "bf16"});
  return all;
}

INSTANTIATE_TEST_SUITE_P(Schedules, PrecisionPipeline, ::testing::ValuesIn(layouts()),
                         [](const ::testing::TestParamInfo<Layout>& i) {
                           return name_of(i.param);
                         });

}  // namespace
}  // namespace trillion
