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
#include "train/memory_check.h"
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

// A run's summary.json against the memory plan (train/memory_check.h) of its layout `layout`
// plus `set`: every rank's measured extra bytes equal the plan's formula for the elements it owns,
// and the largest equals the plan's checkpoint term (the busiest rank's).
void expect_planned_checkpoint_bytes(const std::string& dir, std::vector<std::string> layout,
                                     const std::string& set) {
  if (!set.empty()) layout.push_back(set);
  const auto c = read_json(dir + "/summary.json")["checkpoints"];
  const auto measured = c["extra_bytes_per_rank"], predicted = c["predicted_extra_bytes_per_rank"];
  ASSERT_EQ(measured.size(), predicted.size()) << c;
  for (size_t r = 0; r < measured.size(); ++r) {
    EXPECT_EQ(measured[r].get<double>(), predicted[r].get<double>()) << dir << " rank " << r;
  }
  const double plan =
      plan_process_memory(load_run_config(config_path("tiny.toml"), layout)).checkpoint;
  EXPECT_EQ(c["predicted_extra_bytes"].get<double>(), plan) << dir;
  EXPECT_EQ(c["extra_bytes"].get<double>(), plan) << dir;
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
    // The memory plan's checkpoint term is what was measured.
    for (const auto& [dir, set] : {std::pair<std::string, std::string>{sync, ""},
                                   {staged, "checkpoint.write_buffer_mb=0.015625"},
                                   {async, "checkpoint.async=true"}}) {
      expect_planned_checkpoint_bytes(
          dir,
          n == 1 ? std::vector<std::string>{}
                 : std::vector<std::string>{"parallel.dp=2", "parallel.zero=3"},
          set);
    }
    EXPECT_EQ(total, 4.0 * kParams);  // the ranks' parts tile the model
    EXPECT_EQ(files_of(staged + "/checkpoints/step_00000008").size(), n == 1 ? 6u : 9u);
    const auto cmp = run_trillion("compare " + sync + " " + staged + " --tol 0");
    EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
  }
}

// The same at ZeRO-0 dp 2 (rank 0 owns the whole model, rank 1 nothing: it holds no buffer and no
// snapshot), at tp 2 (rank 0 owns its half of every split tensor and the replicated norms, rank 1
// its half only) and at pp 2 (each rank its stage; the plan is the larger): 4 steps, the final
// checkpoint, with the small buffer and async.
TEST(AsyncCheckpoint, TheMemoryPlansCheckpointBytesAreTheMeasuredOnesAtZero0Tp2AndPp2) {
  const std::string staged = "checkpoint.write_buffer_mb=0.015625", async = "checkpoint.async=true";
  const std::vector<std::string> zero0{"parallel.dp=2", "parallel.zero=0"}, tp2{"parallel.tp=2"},
      pp2{"parallel.pp=2"};
  for (const auto& [layout, set] :
       {std::pair{zero0, staged}, std::pair{zero0, async}, std::pair{tp2, staged},
        std::pair{tp2, async}, std::pair{pp2, async}}) {
    std::string flags;
    for (const std::string& kv : layout) flags += " --set " + kv;
    const std::string dir = shared_run(kEnv + "launch -n 2 -- train " + config_path("tiny.toml") +
                                       " --quiet --set train.steps=4" + flags + " --set " + set);
    SCOPED_TRACE(flags + " " + set);
    expect_planned_checkpoint_bytes(dir, layout, set);
    const auto per_rank = read_json(dir + "/summary.json")["checkpoints"]["extra_bytes_per_rank"];
    ASSERT_EQ(per_rank.size(), 2u);
    if (layout == zero0) {
      EXPECT_EQ(per_rank[0].get<double>(), set == async ? 12.0 * kParams : 16384.0);
      EXPECT_EQ(per_rank[1].get<double>(), 0.0);
    } else if (set == async) {
      // The shards tile the model and differ by 32-element norms, 12 bytes each: tp rank 0 also
      // owns the 5 replicated ones; pp stage 1 holds the final one.
      EXPECT_EQ(per_rank[0].get<double>() + per_rank[1].get<double>(), 12.0 * kParams);
      EXPECT_EQ(per_rank[0].get<double>() - per_rank[1].get<double>(),
                layout == tp2 ? 12.0 * 5 * 32 : -12.0 * 32);
    }
  }
}

// What the time of checkpoints is reported as (structure, not timing): async stands still for
// its snapshot and commits and overlaps the writes; sync has no snapshot, no background time and
// no wait.
TEST(AsyncCheckpoint, SummaryReportsTheCostFields) {
  for (int n : {1, 2}) {
    const auto sync = read_json(shared_run(run(n, 8, "")) + "/summary.json")["checkpoints"];
    const auto async = read_json(shared_run(run(n, 8, kAsync)) + "/summary.json")["checkpoints"];
    for (const char* key :
         {"seconds", "seconds_per_checkpoint", "wait_seconds", "waits", "background_seconds",
          "snapshot_seconds", "commit_seconds", "step_seconds", "extra_bytes",
          "extra_bytes_per_rank", "predicted_extra_bytes", "predicted_extra_bytes_per_rank"}) {
      EXPECT_TRUE(sync.contains(key)) << key << " " << sync;
      EXPECT_TRUE(async.contains(key)) << key << " " << async;
    }
    EXPECT_EQ(async["written"], 2);
    for (const char* key : {"seconds", "seconds_per_checkpoint", "background_seconds",
                            "snapshot_seconds", "commit_seconds", "step_seconds"}) {
      EXPECT_GT(async[key].get<double>(), 0) << key << " " << async;
    }
    EXPECT_GE(async["wait_seconds"].get<double>(), 0);
    EXPECT_NEAR(async["seconds_per_checkpoint"].get<double>(), async["seconds"].get<double>() / 2,
                1e-12);
    EXPECT_EQ(sync["written"], 2);
    EXPECT_GT(sync["seconds"].get<double>(), 0);
    EXPECT_GT(sync["commit_seconds"].get<double>(), 0);
    EXPECT_EQ(sync["snapshot_seconds"].get<double>(), 0);
    EXPECT_EQ(sync["background_seconds"].get<double>(), 0);
    EXPECT_EQ(sync["wait_seconds"].get<double>(), 0);
    EXPECT_EQ(sync["waits"], 0);
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
