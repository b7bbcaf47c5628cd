// Async checkpoints and the write buffer (issue 15), on configs/tiny.toml at dp 2 ZeRO-3 and in one
// process, a checkpoint every 4 steps:
// - an async run writes the sync run's checkpoints byte for byte (every file but config.toml,
//   which records checkpoint.async, and its manifest entry);
// - measured memory (summary.json checkpoints.extra_bytes_per_rank, the tracker's peak beyond the
//   rank's state while it checkpoints): sync holds exactly its write buffer, capped at one owned
//   part (the rank's params file); async exactly its shard (params file + optimizer file);
// - a run stopped while an async checkpoint is in flight drains it, and the resumed run is bitwise
//   the clean one; a disk that fills during one rank's async write ends every rank with the sync
//   path's one line, keeps the previous checkpoint, and --resume is bitwise the clean run.
#include <gtest/gtest.h>

#include <filesystem>

#include "../train/cli_util.h"
#include "core/error.h"
#include "train/run_config.h"

namespace trillion {
namespace {

using testing::config_path;
using testing::fresh_dir;
using testing::has;
using testing::one_thread_per_rank;
using testing::read_json;
using testing::run_trillion;
using testing::shared_run;
using testing::slurp;
namespace fs = std::filesystem;

const std::string kEnv = one_thread_per_rank();
constexpr int64_t kParams = 22688;  // configs/tiny.toml

// `n` = 1: one process; 2: dp 2 ZeRO-3.
std::string run(int n, int steps, const std::string& extra) {
  return kEnv + (n == 1 ? "" : "launch -n 2 -- ") + "train " + config_path("tiny.toml") +
         " --quiet --set train.checkpoint_every=4 --set train.steps=" + std::to_string(steps) +
         (n == 1 ? "" : " --set parallel.dp=2 --set parallel.zero=3") + extra;
}
const std::string kAsync = " --set checkpoint.async=true";

std::vector<std::string> files_of(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(AsyncCheckpoint, WritesTheSyncRunsFilesByteForByte) {
  for (int n : {1, 2}) {
    const std::string sync = shared_run(run(n, 8, ""));
    const std::string async = shared_run(run(n, 8, kAsync));
    for (const std::string step : {"step_00000004", "step_00000008"}) {
      const std::string a = sync + "/checkpoints/" + step, b = async + "/checkpoints/" + step;
      ASSERT_EQ(files_of(a), files_of(b)) << n << " " << step;
      EXPECT_EQ(files_of(a).size(), n == 1 ? 6u : 9u);  // + layout.json, 2 files per rank
      for (const std::string& f : files_of(a)) {
        if (f == "config.toml" || f == "manifest.json") continue;
        EXPECT_EQ(slurp(a + "/" + f), slurp(b + "/" + f)) << n << " " << step << "/" << f;
      }
      auto ma = read_json(a + "/manifest.json"), mb = read_json(b + "/manifest.json");
      ma.erase("config.toml");
      mb.erase("config.toml");
      EXPECT_EQ(ma, mb) << n << " " << step;
    }
    EXPECT_EQ(read_json(async + "/summary.json")["checkpoints"]["written"], 2);
    EXPECT_TRUE(read_json(async + "/summary.json")["checkpoints"]["async"].get<bool>());
  }
}

// Per rank, the measured extra bytes of its checkpoints against its own files: the params file
// is one owned part (elements x 4 bytes), the optimizer file two.
TEST(AsyncCheckpoint, ARankHoldsItsWriteBufferOrItsShardAndNothingMore) {
  const std::string small = " --set checkpoint.write_buffer_mb=0.015625";  // 16 KiB
  for (int n : {1, 2}) {
    const std::string sync = shared_run(run(n, 8, ""));
    const std::string staged = shared_run(run(n, 8, small));
    const std::string async = shared_run(run(n, 8, kAsync));
    const std::string ckpt = sync + "/checkpoints/step_00000008/";
    double total = 0;
    for (int r = 0; r < n; ++r) {
      const std::string params =
          n == 1 ? "params.bin" : "params_r0000" + std::to_string(r) + ".bin";
      const std::string optimizer =
          n == 1 ? "optimizer.bin" : "optimizer_r0000" + std::to_string(r) + ".bin";
      const double owned = static_cast<double>(fs::file_size(ckpt + params));
      const double shard = owned + static_cast<double>(fs::file_size(ckpt + optimizer));
      EXPECT_GT(owned, 16384.0);  // so the small buffer streams each part in pieces
      total += owned;
      auto extra = [&](const std::string& dir) {
        return read_json(dir + "/summary.json")["checkpoints"]["extra_bytes_per_rank"][r]
            .get<double>();
      };
      EXPECT_EQ(extra(sync), owned) << n << " " << r;  // the 64 MiB default, capped
      EXPECT_EQ(extra(staged), 16384.0) << n << " " << r;
      EXPECT_EQ(extra(async), shard) << n << " " << r;
      EXPECT_EQ(shard, 3 * owned);
    }
    EXPECT_EQ(total, 4.0 * kParams);  // the ranks' parts tile the model
    EXPECT_EQ(files_of(staged + "/checkpoints/step_00000008").size(), n == 1 ? 6u : 9u);
    const auto cmp = run_trillion("compare " + sync + " " + staged + " --tol 0");
    EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
  }
}

TEST(AsyncCheckpoint, AStoppedAsyncRunDrainsAndResumesBitwise) {
  const std::string clean = shared_run(run(2, 12, ""));
  const std::string dir = fresh_dir("async_stop_resume");
  const auto first = run_trillion(run(2, 12, kAsync) + " --run-dir " + dir + " --stop-after 6");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(files_of(dir + "/checkpoints"),
            (std::vector<std::string>{"step_00000004", "step_00000006"}));
  const std::string events = slurp(dir + "/events.log");
  EXPECT_TRUE(has(events, "checkpoint " + dir +
                              "/checkpoints/step_00000006 written (async: "
                              "committed when drained)"))
      << events;
  const auto resumed = run_trillion(run(2, 12, kAsync) + " --run-dir " + dir + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(has(slurp(dir + "/events.log"),
                  "resumed from " + dir + "/checkpoints/step_00000006 at step 6"));
  const auto cmp = run_trillion("compare " + clean + " " + dir + " --tol 0");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
  EXPECT_TRUE(has(cmp.output, "(bitwise equal)")) << cmp.output;
}

TEST(AsyncCheckpoint, ADiskFullDuringOneRanksAsyncWriteLosesNothing) {
  const std::string clean = shared_run(run(2, 12, ""));
  const std::string dir = fresh_dir("async_disk_full");
  ::setenv("TRILLION_DISK_FULL_AT_STEP", "8:1", 1);
  const auto full = run_trillion(run(2, 12, kAsync) + " --run-dir " + dir);
  ::unsetenv("TRILLION_DISK_FULL_AT_STEP");
  EXPECT_EQ(full.exit_code, 2) << full.output;
  EXPECT_TRUE(
      has(full.output, "checkpoint of step 8 not written: cannot write checkpoint file '" + dir +
                           "/checkpoints/.tmp-step_00000008/params_r00001.bin': No space left on "
                           "device"))
      << full.output;
  EXPECT_EQ(files_of(dir + "/checkpoints"), std::vector<std::string>{"step_00000004"});
  const auto resumed = run_trillion(run(2, 12, kAsync) + " --run-dir " + dir + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(has(slurp(dir + "/events.log"),
                  "resumed from " + dir + "/checkpoints/step_00000004 at step 4"));
  const auto cmp = run_trillion("compare " + clean + " " + dir + " --tol 0");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
}

TEST(AsyncCheckpoint, TheCheckpointSectionIsCheckedWithOneLine) {
  const std::string model =
      "[model]\nvocab_size = 64\nd_model = 32\nn_layers = 1\nn_heads = 2\nffn_hidden = 64\nseq_len "
      "= 16\n";
  const RunConfig defaults = parse_run_config(model, "run.toml", {});
  EXPECT_FALSE(defaults.checkpoint.async);
  EXPECT_EQ(defaults.checkpoint.write_buffer_mb, 64.0);
  EXPECT_TRUE(parse_run_config(to_toml(defaults), "resolved", {}).checkpoint.async == false);
  auto error_of = [&](const std::string& tail) {
    try {
      parse_run_config(model + tail, "run.toml", {});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error_of("[checkpoint]\nwrite_buffer_mb = 0\n"),
            "run.toml: checkpoint.write_buffer_mb = 0 must be between 0.00390625 (4 KiB) and "
            "65536; 64 is the default");
  EXPECT_EQ(error_of("[checkpoint]\nasync = \"yes\"\n"),
            "run.toml: checkpoint.async has the wrong type (expected true or false)");
  EXPECT_TRUE(has(error_of("[checkpoint]\nasync = true\n[diloco]\nislands = 1\n"),
                  "checkpoint.async = true is not supported with [diloco]"));
}

}  // namespace
}  // namespace trillion
