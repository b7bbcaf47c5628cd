// Precision recipes under tensor + sequence parallelism (issue 14): the linear layers' GEMMs run
// on the rank's local shapes, and tp 2 trains the one-process run of the same recipe. bf16
// rounds element by element, so only the fp32 accumulation order differs and the losses agree
// as fp32's do; fp8's tiles are cut from the local shapes (a column-parallel weight's 128x128
// blocks and a row-parallel input's 1x128 tiles end at the shard's edge), so its scales, and
// the losses, differ at the quantisation's level: bounded here, not bitwise.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "../train/cli_util.h"

namespace trillion {
namespace {

using testing::config_path;
using testing::fresh_dir;
using testing::run_trillion;
using testing::shared_run;

const std::string kEnv = [] {
  ::setenv("OMP_NUM_THREADS", "1", 1);
  return std::string();
}();

std::vector<double> losses(const std::string& dir) {
  std::ifstream in(dir + "/metrics.jsonl");
  std::vector<double> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  return out;
}

void expect_tp2_trains_the_one_process_run(const std::string& recipe, double rel_tol) {
  const std::string flags = "train " + config_path("tiny.toml") +
                            " --quiet --set train.steps=3 --set model.n_kv_heads=4 "
                            "--set precision.recipe=" +
                            recipe;
  const std::string ref = shared_run(kEnv + flags);
  const std::string run = fresh_dir("precision_tp2_" + recipe);
  const auto r =
      run_trillion(kEnv + "launch -n 2 -- " + flags + " --run-dir " + run + " --set parallel.tp=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<double> a = losses(ref), b = losses(run);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(b[i], a[i], rel_tol * a[i]) << recipe << " step " << i + 1;
  }
}

TEST(PrecisionTensorParallel, Bf16Tp2IsTheOneProcessRun) {
  expect_tp2_trains_the_one_process_run("bf16", 1e-5);
}

TEST(PrecisionTensorParallel, Fp8Tp2IsTheOneProcessRunToQuantisationLevel) {
  expect_tp2_trains_the_one_process_run("fp8", 2e-4);
}

}  // namespace
}  // namespace trillion
