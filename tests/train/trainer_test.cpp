// End-to-end training through the real `trillion` binary: convergence to a Markov chain's exact
// entropy rate, bitwise resume (also past a corrupt checkpoint), compare, generate, and clear
// errors that leave existing run files intact.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli_util.h"
#include "core/error.h"
#include "train/run_config.h"

using namespace trillion;
using namespace trillion::testing;
namespace fs = std::filesystem;

namespace {
std::string tiny() {
  return config_path("tiny.toml");
}
}  // namespace

TEST(MarkovConvergence, Order1Vocab64ReachesTheEntropyRate) {
  const std::string dir = fresh_dir("markov1");
  const auto r =
      run_trillion("train " + config_path("markov.toml") + " --run-dir " + dir + " --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto s = read_json(dir + "/summary.json");
  const double h = s["entropy_rate"], val = s["final_val_loss"];
  EXPECT_LT(val - h, 0.05) << "val " << val << " entropy rate " << h;
  EXPECT_GT(val - h, -0.02);  // cannot beat the entropy rate (beyond sampling noise)
}

TEST(MarkovConvergence, Order2Vocab16ReachesTheEntropyRate) {
  const std::string dir = fresh_dir("markov2");
  const auto r = run_trillion("train " + config_path("markov.toml") + " --run-dir " + dir +
                              " --quiet --set data.order=2 --set data.vocab=16 "
                              "--set train.steps=1000");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto s = read_json(dir + "/summary.json");
  const double h = s["entropy_rate"], val = s["final_val_loss"];
  EXPECT_LT(val - h, 0.05) << "val " << val << " entropy rate " << h;
  EXPECT_GT(val - h, -0.02);
}

TEST(Resume, InterruptedRunIsBitwiseIdenticalToUninterrupted) {
  const std::string full = fresh_dir("full"), parts = fresh_dir("parts");
  ASSERT_EQ(run_trillion("train " + tiny() + " --run-dir " + full + " --quiet").exit_code, 0);
  const auto first = run_trillion("train " + tiny() + " --run-dir " + parts +
                                  " --quiet --stop-after 10 --set train.checkpoint_every=5");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_FALSE(read_json(parts + "/summary.json")["completed"].get<bool>());
  const auto second = run_trillion("train " + tiny() + " --run-dir " + parts +
                                   " --quiet --resume --set train.checkpoint_every=5");
  ASSERT_EQ(second.exit_code, 0) << second.output;
  const auto cmp = run_trillion("compare " + full + " " + parts + " --tol 0");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
  EXPECT_NE(cmp.output.find("bitwise equal"), std::string::npos) << cmp.output;
}

TEST(Resume, CorruptCheckpointIsReportedAndThePreviousOneUsed) {
  const std::string full = fresh_dir("full2"), parts = fresh_dir("parts2");
  ASSERT_EQ(run_trillion("train " + tiny() + " --run-dir " + full + " --quiet").exit_code, 0);
  ASSERT_EQ(run_trillion("train " + tiny() + " --run-dir " + parts +
                         " --quiet --stop-after 10 --set train.checkpoint_every=5")
                .exit_code,
            0);
  {  // flip one byte of the newest checkpoint's parameters
    std::fstream f(parts + "/checkpoints/step_00000010/params.bin",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  const auto resumed = run_trillion("train " + tiny() + " --run-dir " + parts +
                                    " --resume --set train.checkpoint_every=5");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("step_00000010 is corrupt (params.bin checksum mismatch)"),
            std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("at step 5"), std::string::npos) << resumed.output;
  EXPECT_EQ(run_trillion("compare " + full + " " + parts + " --tol 0").exit_code, 0);
}

TEST(Compare, DetectsDifferentRunsAndHonoursTheTolerance) {
  const std::string a = fresh_dir("cmp_a"), b = fresh_dir("cmp_b");
  ASSERT_EQ(run_trillion("train " + tiny() + " --run-dir " + a + " --quiet").exit_code, 0);
  ASSERT_EQ(run_trillion("train " + tiny() + " --run-dir " + b + " --quiet --set optim.lr=2.9e-3")
                .exit_code,
            0);
  EXPECT_EQ(run_trillion("compare " + a + " " + b + " --tol 0").exit_code, 1);
  EXPECT_EQ(run_trillion("compare " + a + " " + b + " --tol 10").exit_code, 0);
  EXPECT_EQ(run_trillion("compare " + a + " /nonexistent --tol 0").exit_code, 2);
}

TEST(Generate, IsDeterministicForASeed) {
  const std::string dir = fresh_dir("gen");
  ASSERT_EQ(run_trillion("train " + tiny() + " --run-dir " + dir + " --quiet").exit_code, 0);
  const std::string cmd =
      "generate --checkpoint " + dir + " --prompt-ids '1 2 3' --max-tokens 12 --seed 4 --top-k 10";
  const auto a = run_trillion(cmd), b = run_trillion(cmd);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(a.output, b.output);
  int count = 0;
  std::stringstream ss(a.output);
  int id;
  while (ss >> id) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 64);
    ++count;
  }
  EXPECT_EQ(count, 12);
  EXPECT_EQ(run_trillion("generate --checkpoint " + dir + " --prompt-ids '99'").exit_code, 2);
}

TEST(BadInput, ExistingRunIsNotOverwritten) {
  const std::string dir = fresh_dir("exists");
  ASSERT_EQ(run_trillion("train " + tiny() + " --run-dir " + dir + " --quiet").exit_code, 0);
  const auto before = fs::last_write_time(dir + "/metrics.jsonl");
  const auto r = run_trillion("train " + tiny() + " --run-dir " + dir);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("already holds a run; pass --resume"), std::string::npos) << r.output;
  EXPECT_EQ(fs::last_write_time(dir + "/metrics.jsonl"), before);
}

TEST(BadInput, ConfigErrorsNameTheKey) {
  const std::string dir = fresh_dir("badcfg");
  auto r = run_trillion("train " + tiny() + " --run-dir " + dir + " --set model.n_heads=5");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("model.n_heads = 5 does not divide model.d_model = 32"),
            std::string::npos)
      << r.output;
  r = run_trillion("train " + tiny() + " --run-dir " + dir + " --set train.stepz=3");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("unknown key 'train.stepz'"), std::string::npos) << r.output;
  r = run_trillion("train " + tiny() + " --run-dir " + dir +
                   " --set data.source=shards "
                   "--set data.path=/nonexistent");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("/nonexistent"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir));  // nothing is created for a run that cannot start
}

TEST(RunConfig, ResolvedTomlRoundTrips) {
  const RunConfig a = load_run_config(tiny(), {"train.steps=7", "optim.schedule=wsd"});
  EXPECT_EQ(a.train.steps, 7);
  const RunConfig b = parse_run_config(to_toml(a), "resolved", {});
  EXPECT_EQ(to_toml(a), to_toml(b));
  EXPECT_EQ(b.optim.schedule, "wsd");
  EXPECT_EQ(b.model.head_dim, 8);
}

// Issue 15 names them [checkpoint] interval and keep; train.checkpoint_every and
// train.keep_checkpoints are their old names, still read. Both given with different values is one
// line; a --set of either name replaces the file's value under both (so a resolved config.toml
// takes --set train.checkpoint_every).
TEST(RunConfig, CheckpointIntervalAndKeepAcceptTheirOldNames) {
  const std::string model =
      "[model]\nvocab_size = 64\nd_model = 32\nn_layers = 1\nn_heads = 2\nffn_hidden = 64\n"
      "seq_len = 16\n";
  auto parse = [&](const std::string& tail, const std::vector<std::string>& set = {}) {
    return parse_run_config(model + tail, "run.toml", set).checkpoint;
  };
  auto error_of = [&](const std::string& tail, const std::vector<std::string>& set = {}) {
    try {
      parse_run_config(model + tail, "run.toml", set);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(parse("").interval, 0);
  EXPECT_EQ(parse("").keep, 2);
  const CheckpointConfig named = parse("[checkpoint]\ninterval = 4\nkeep = 3\n");
  EXPECT_EQ(named.interval, 4);
  EXPECT_EQ(named.keep, 3);
  const CheckpointConfig old = parse("[train]\ncheckpoint_every = 5\nkeep_checkpoints = 1\n");
  EXPECT_EQ(old.interval, 5);
  EXPECT_EQ(old.keep, 1);
  EXPECT_EQ(parse("[train]\ncheckpoint_every = 4\n[checkpoint]\ninterval = 4\n").interval, 4);
  EXPECT_EQ(error_of("[train]\ncheckpoint_every = 8\n[checkpoint]\ninterval = 4\n"),
            "run.toml: checkpoint.interval = 4 and train.checkpoint_every = 8 disagree: "
            "train.checkpoint_every is the old name of checkpoint.interval; set one of them");
  EXPECT_EQ(error_of("[checkpoint]\nkeep = 2\n", {"train.keep_checkpoints=3"}), "");
  EXPECT_EQ(error_of("", {"checkpoint.keep=2", "train.keep_checkpoints=3"}),
            "run.toml: checkpoint.keep = 2 and train.keep_checkpoints = 3 disagree: "
            "train.keep_checkpoints is the old name of checkpoint.keep; set one of them");
  EXPECT_EQ(error_of("[checkpoint]\nkeep = 0\n"), "run.toml: checkpoint.keep = 0 must be >= 1");
  EXPECT_EQ(error_of("[train]\ncheckpoint_every = -1\n"),
            "run.toml: train.checkpoint_every = -1 must be >= 0");
  EXPECT_EQ(error_of("[checkpoint]\ninterval = -1\n"),
            "run.toml: checkpoint.interval = -1 must be >= 0");
  // The resolved config writes the names; an old-name --set on it replaces the value.
  const RunConfig resolved = parse_run_config(model + "[train]\ncheckpoint_every = 5\n", "a", {});
  const std::string text = to_toml(resolved);
  EXPECT_NE(text.find("interval = 5\nkeep = 2\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("checkpoint_every"), std::string::npos) << text;
  EXPECT_EQ(parse_run_config(text, "resolved", {"train.checkpoint_every=7"}).checkpoint.interval,
            7);
  EXPECT_EQ(parse_run_config(text, "resolved", {}).checkpoint.interval, 5);
}

// configs/mtp-tiny.toml end to end: metrics.jsonl has each depth's loss and the weight schedule
// (0.3 for 10 steps, then 0.1), both losses fall; generate and both exports take the main model.
TEST(MultiTokenPrediction, TrainsLogsEachDepthGeneratesAndExportsTheMainModel) {
  const std::string dir = fresh_dir("h33mtp_train");
  const auto r = run_trillion("train " + config_path("mtp-tiny.toml") + " --run-dir " + dir +
                              " --quiet --set train.log_every=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto lines = read_metrics(dir);
  ASSERT_EQ(lines.size(), 20u);
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i]["mtp_loss_weight"].get<double>(), i < 10 ? 0.3 : 0.1) << "step " << i + 1;
  }
  EXPECT_LT(lines.back()["loss"].get<double>(), lines.front()["loss"].get<double>() - 0.1);
  EXPECT_LT(lines.back()["mtp_loss_1"].get<double>(),
            lines.front()["mtp_loss_1"].get<double>() - 0.05);
  const auto g = run_trillion("generate --checkpoint " + dir + " --prompt-ids '1 2 3' --max-tokens 4");
  EXPECT_EQ(g.exit_code, 0) << g.output;
  const auto st = run_trillion("export --checkpoint " + dir + " --format safetensors --out " + dir +
                               "/hf 2>&1");
  EXPECT_EQ(st.exit_code, 0) << st.output;
  const auto gg = run_trillion("export --checkpoint " + dir + " --format gguf --out " + dir +
                               "/m.gguf 2>&1");
  EXPECT_EQ(gg.exit_code, 0) << gg.output;
}
