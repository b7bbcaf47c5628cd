// --resume with a changed config (issue 18): the change is said and logged key by key; a change
// no checkpoint survives (shape, dtype, vocabulary) is refused before anything is touched. Also
// the plain-log progress output a new user meets: lr, grad norm, elapsed, every validation loss
// on its own line, a wall-clock time on every metrics line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "train/config_diff.h"
#include "train/metrics.h"

namespace trillion {
namespace {

using testing::config_path;
using testing::fresh_dir;
using testing::has;
using testing::run_trillion;
using testing::slurp;
namespace fs = std::filesystem;

TEST(ConfigDiff, ListsChangedAddedAndRemovedKeys) {
  const auto changes = diff_configs("[model]\nd_model = 32\nn_layers = 2\n\n[optim]\nlr = 0.003\n",
                                    "[model]\nd_model = 64\nn_layers = 2\n\n[optim]\nlr = 0.003\n"
                                    "\n[guard]\nmax_skips = 5\n");
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(describe(changes), "model.d_model 32 -> 64, guard.max_skips (absent) -> 5");
  EXPECT_TRUE(breaks_checkpoint("model.d_model"));
  EXPECT_TRUE(breaks_checkpoint("model.vocab_size"));
  EXPECT_FALSE(breaks_checkpoint("model.recompute"));
  EXPECT_FALSE(breaks_checkpoint("optim.lr"));
}

TEST(ConfigDiff, ResumeSaysWhatChangedAndRefusesANewShape) {
  const std::string dir = fresh_dir("resume_diff");
  const std::string base = "train " + config_path("tiny.toml") + " --run-dir " + dir;
  ASSERT_EQ(run_trillion(base + " --quiet --set train.steps=2").exit_code, 0);
  const std::string metrics_before = slurp(dir + "/metrics.jsonl");
  const auto bad = run_trillion(base + " --resume --set model.d_model=64");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_TRUE(has(bad.output, "cannot resume '" + dir +
                                  "' with this config: model.d_model 32 -> "
                                  "64, model.head_dim 8 -> 16 (its checkpoints hold tensors of the "
                                  "old shape or kind)"))
      << bad.output;
  EXPECT_EQ(slurp(dir + "/metrics.jsonl"), metrics_before);  // nothing touched
  const auto ok = run_trillion(base +
                               " --resume --set train.steps=4 --set train.log_every=2"
                               " --set train.eval_every=1 --set model.recompute=\"full\"");
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_TRUE(has(slurp(dir + "/events.log"),
                  "resumed with a changed config: model.recompute 'none' -> 'full', "
                  "train.eval_every 0 -> 1, train.log_every 5 -> 2, train.steps 2 -> 4\n"))
      << slurp(dir + "/events.log");
  // Plain (non-terminal) output: step 3's validation on its own line, step 4's progress line.
  EXPECT_TRUE(has(ok.output, "step 3: val loss ")) << ok.output;
  EXPECT_TRUE(has(ok.output, "step 4/4 | loss ")) << ok.output;
  EXPECT_TRUE(has(ok.output, " | lr ")) << ok.output;
  EXPECT_TRUE(has(ok.output, " | grad norm ")) << ok.output;
  EXPECT_TRUE(has(ok.output, " | elapsed ")) << ok.output;
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line;
  const double now = unix_seconds();
  while (std::getline(in, line)) {
    const double t = nlohmann::json::parse(line)["time"].get<double>();
    EXPECT_GT(t, now - 3600);
    EXPECT_LE(t, now);
  }
  fs::remove_all(dir);
}

// A resume that changes the global batch (train.grad_accum, train.micro_batch, with any dp) goes
// on at the checkpoint's next sample: step s reads from next_sample + (s - resumed step) x the new
// global batch, so no sample is skipped or read twice. 3 steps of 2 x 4 samples (0, 8, 16), then
// grad_accum 1 (24, 28, 32), then dp 2 with micro_batch 8 (36, 44).
TEST(Resume, AChangedGlobalBatchGoesOnAtTheCheckpointsNextSample) {
  const std::string dir = fresh_dir("resume_next_sample");
  const std::string base =
      "train " + config_path("tiny.toml") + " --quiet --set checkpoint.interval=3 --run-dir " + dir;
  ASSERT_EQ(
      run_trillion(base + " --set train.steps=6 --set train.grad_accum=2 --stop-after 3").exit_code,
      0);
  auto state = [&](int step) {
    return testing::read_json(dir + "/checkpoints/step_0000000" + std::to_string(step) +
                              "/state.json")["next_sample"]
        .get<int64_t>();
  };
  EXPECT_EQ(state(3), 24);
  const auto r = run_trillion(base + " --resume --set train.steps=6 --set train.grad_accum=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(slurp(dir + "/events.log"),
                  "the data goes on at global sample 24, the checkpoint's next sample (step 3 at "
                  "this run's 4 samples per step would be sample 12)"))
      << slurp(dir + "/events.log");
  EXPECT_EQ(state(6), 36);
  const auto two = run_trillion("launch -n 2 -- " + base +
                                " --resume --set train.steps=8 --set train.micro_batch=8"
                                " --set parallel.dp=2");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  std::vector<int64_t> samples, tokens;
  for (const auto& m : testing::read_metrics(dir)) {
    samples.push_back(m["sample"].get<int64_t>());
    tokens.push_back(m["tokens"].get<int64_t>());
  }
  EXPECT_EQ(samples, (std::vector<int64_t>{0, 8, 16, 24, 28, 32, 36, 44}));
  // Tokens trained so far: the next sample x seq_len 32.
  EXPECT_EQ(tokens, (std::vector<int64_t>{256, 512, 768, 896, 1024, 1152, 1408, 1664}));
  EXPECT_EQ(testing::read_json(dir + "/checkpoints/step_00000008/state.json")["next_sample"], 52);
  fs::remove_all(dir);
}

TEST(ConfigDiff, PercentagesKeepThreeSignificantDigits) {
  EXPECT_EQ(format_percent(0.413), "41.3%");
  EXPECT_EQ(format_percent(0.0207), "2.07%");
  EXPECT_EQ(format_percent(0.000123), "0.0123%");
  EXPECT_EQ(format_percent(0), "0.0%");
}

}  // namespace
}  // namespace trillion
