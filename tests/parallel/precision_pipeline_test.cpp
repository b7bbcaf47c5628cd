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

namespace trillion {
namespace {

using testing::compare_runs;
using testing::config_path;
using testing::fresh_dir;
using testing::one_thread_per_rank;
using testing::read_metrics;
using testing::run_trillion;
using testing::shared_run;

const std::string kEnv = one_thread_per_rank();

std::string train_args(const std::string& recipe) {
  return "train " + config_path("tiny.toml") +
         " --quiet --set train.steps=2 --set model.n_layers=4 --set train.grad_accum=4 --set "
         "precision.recipe=" +
         recipe;
}

struct Layout {
  std::string recipe, schedule;
  bool bitwise;  // else within the recipe's retile bounds
};
void PrintTo(const Layout& l, std::ostream* os) {
  *os << l.recipe << "_" << l.schedule;
}

class PrecisionPipeline : public ::testing::TestWithParam<Layout> {};

TEST_P(PrecisionPipeline, TrainsTheOneProcessRunOfTheRecipe) {
  const Layout l = GetParam();
  const std::string ref = shared_run(kEnv + train_args(l.recipe));
  ASSERT_EQ(read_metrics(ref).size(), 2u) << "the one-process reference did not run";
  const std::string run = fresh_dir("precision_pp2_" + l.recipe + "_" + l.schedule);
  const std::string layout = " --set parallel.pp=2 --set parallel.schedule=" + l.schedule +
                             (l.schedule == "interleaved" ? " --set parallel.chunks=2" : "");
  const auto r =
      run_trillion(kEnv + "launch -n 2 -- " + train_args(l.recipe) + " --run-dir " + run + layout);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  testing::RunDiffs d;
  if (l.bitwise) {
    d = compare_runs(ref, run, 0);
    EXPECT_EQ(d.exit_code, 0) << d.output;
  } else {
    d = testing::expect_within_retile_bounds(l.recipe, ref, run, false);
  }
  testing::report(l.recipe + " pp2 " + l.schedule, d);
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
  return all;
}

INSTANTIATE_TEST_SUITE_P(Schedules, PrecisionPipeline, ::testing::ValuesIn(layouts()),
                         [](const ::testing::TestParamInfo<Layout>& i) {
                           std::string name = i.param.recipe + "_" + i.param.schedule;
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

}  // namespace
}  // namespace trillion
