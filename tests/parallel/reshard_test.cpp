// Resharding (issue 15): a sharded checkpoint written at one layout resumes at another, and the
// continued run matches an uninterrupted run at the new layout within 1e-5 (`trillion compare`,
// DESIGN.md principle 1). configs/tiny.toml, 6 steps, a checkpoint every 3: stop after 3 at the
// old layout, resume at the new one. Layouts: dp 4 ZeRO-1 -> dp 2 ZeRO-3 and -> tp 2; dp 2 ->
// dp 4 ZeRO-2; one process -> cp 2; tp 2 -> one process and -> pp 2; pp 2 -> tp 2; pp 2 x dp 2
// ZeRO-3 (1F1B, parameters gathered per stage) -> tp 2 x dp 2 ZeRO-1 and -> one process. Also: each
// rank's shard holds exactly its part (file sizes = its ranges, summing to the model), and the data
// position (next_sample) is the one-process run's, whatever the dp. Bad inputs at dp 2: a disk that
// fills during one rank's shard write (every rank stops with that rank's one line, the previous
// checkpoint survives, --resume needs no cleanup and is bitwise the clean run), a truncated shard
// (the previous checkpoint is used), a checkpoint of another model (one line naming both sizes).
// What a checkpoint costs in memory: async_checkpoint_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>

#include "../train/cli_util.h"

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

constexpr int64_t kParams = 22688;  // configs/tiny.toml
const std::string kEnv = one_thread_per_rank();

std::string train(const std::string& layout) {
  return "train " + config_path("tiny.toml") +
         " --quiet --set train.steps=6 --set train.checkpoint_every=3 " + layout;
}
std::string launch(int n, const std::string& layout) {
  return kEnv + (n == 1 ? "" : "launch -n " + std::to_string(n) + " -- ") + train(layout);
}

// Stops `from` after step 3, resumes it at `to`, and compares with the uninterrupted `to` run.
void expect_reshard(int from_n, const std::string& from, int to_n, const std::string& to,
                    const std::string& name) {
  const std::string reference = shared_run(launch(to_n, to));
  const std::string dir = fresh_dir(name);
  const auto first = run_trillion(launch(from_n, from) + " --run-dir " + dir + " --stop-after 3");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto resumed = run_trillion(launch(to_n, to) + " --run-dir " + dir + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const std::string events = slurp(dir + "/events.log");
  EXPECT_TRUE(has(events, "resumed from " + dir + "/checkpoints/step_00000003 at step 3"))
      << events;
  const auto cmp = run_trillion("compare " + reference + " " + dir + " --tol 1e-5");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
  EXPECT_TRUE(has(cmp.output, "MATCH")) << cmp.output;
}

TEST(Reshard, Dp4Zero1ResumesAtDp2Zero3) {
  expect_reshard(4, "--set parallel.dp=4 --set parallel.zero=1", 2,
                 "--set parallel.dp=2 --set parallel.zero=3", "reshard_dp4z1_dp2z3");
}

TEST(Reshard, Tp2ResumesInOneProcess) {
  expect_reshard(2, "--set parallel.tp=2", 1, "", "reshard_tp2_tp1");
}

TEST(Reshard, Pp2ResumesAtTp2) {
  expect_reshard(2, "--set parallel.pp=2", 2, "--set parallel.tp=2", "reshard_pp2_tp2");
}

TEST(Reshard, Dp4Zero1ResumesAtTp2) {
  expect_reshard(4, "--set parallel.dp=4 --set parallel.zero=1", 2, "--set parallel.tp=2",
                 "reshard_dp4z1_tp2");
}

TEST(Reshard, Dp2ResumesAtDp4Zero2) {
  expect_reshard(2, "--set parallel.dp=2", 4, "--set parallel.dp=4 --set parallel.zero=2",
                 "reshard_dp2_dp4z2");
}

TEST(Reshard, OneProcessResumesAtCp2) {
  expect_reshard(1, "", 2, "--set parallel.cp=2", "reshard_tp1_cp2");
}

TEST(Reshard, Tp2ResumesAtPp2) {
  expect_reshard(2, "--set parallel.tp=2", 2, "--set parallel.pp=2", "reshard_tp2_pp2");
}

// Each of the 4 ranks writes its ZeRO-1 chunks and nothing else: its two files hold exactly its
// ranges' elements (parameters; moments twice), the four sum to the model, no rank writes the
// whole model, and the data position equals the one-process run's at the same step.
// Issue 36: a checkpoint of a pipeline run whose stages shard their states over dp (ZeRO-3) holds
// the whole model once, whatever layout reads it.
const std::string kPp2Dp2Zero3 = "--set parallel.pp=2 --set parallel.dp=2 --set parallel.zero=3";

TEST(Reshard, Pp2Dp2Zero3ResumesAtTp2Dp2Zero1) {
  expect_reshard(4, kPp2Dp2Zero3, 4,
                 "--set parallel.tp=2 --set parallel.dp=2 --set parallel.zero=1",
                 "reshard_pp2dp2z3_tp2dp2z1");
}

TEST(Reshard, Pp2Dp2Zero3ResumesInOneProcess) {
  expect_reshard(4, kPp2Dp2Zero3, 1, "", "reshard_pp2dp2z3_one");
}

TEST(Reshard, EveryRankWritesOnlyItsShard) {
  const std::string one = shared_run(launch(1, ""));
  const std::string dir = fresh_dir("reshard_sizes");
  const auto r = run_trillion(launch(4, "--set parallel.dp=4 --set parallel.zero=1") +
                              " --run-dir " + dir + " --stop-after 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string ckpt = dir + "/checkpoints/step_00000003";
  EXPECT_FALSE(fs::exists(ckpt + "/params.bin"));
  const auto layout = read_json(ckpt + "/layout.json");
  EXPECT_EQ(layout["elements"], kParams);
  EXPECT_EQ(layout["world"], 4);
  EXPECT_EQ(layout["writer"]["dp"], 4);
  EXPECT_EQ(layout["writer"]["zero"], 1);
  ASSERT_EQ(layout["shards"].size(), 4u);
  int64_t total = 0;
  for (const auto& shard : layout["shards"]) {
    int64_t elements = 0;
    for (const auto& range : shard["ranges"]) elements += range[1].get<int64_t>();
    EXPECT_EQ(fs::file_size(ckpt + "/" + shard["params"].get<std::string>()), elements * 4);
    EXPECT_EQ(fs::file_size(ckpt + "/" + shard["optimizer"].get<std::string>()), elements * 8);
    EXPECT_LT(elements, kParams / 2);  // about a quarter each (bucket padding aside)
    total += elements;
  }
  EXPECT_EQ(total, kParams);
  EXPECT_EQ(read_json(ckpt + "/state.json")["next_sample"],
            read_json(one + "/checkpoints/step_00000003/state.json")["next_sample"]);
}

std::string dp2(int steps, int every) {
  return kEnv + "launch -n 2 -- train " + config_path("tiny.toml") +
         " --quiet --set parallel.dp=2 --set parallel.zero=3 --set train.steps=" +
         std::to_string(steps) + " --set train.checkpoint_every=" + std::to_string(every);
}

TEST(ShardedBadInput, ADiskFullDuringOneRanksWriteLosesNothing) {
  const std::string clean = shared_run(dp2(8, 4));
  const std::string dir = fresh_dir("sharded_disk_full");
  ::setenv("TRILLION_DISK_FULL_AT_STEP", "8:1", 1);
  const auto full = run_trillion(dp2(8, 4) + " --run-dir " + dir);
  ::unsetenv("TRILLION_DISK_FULL_AT_STEP");
  EXPECT_EQ(full.exit_code, 2) << full.output;
  EXPECT_TRUE(
      has(full.output, "checkpoint of step 8 not written: cannot write checkpoint file '" + dir +
                           "/checkpoints/.tmp-step_00000008/params_r00001.bin': No space left on "
                           "device"))
      << full.output;
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir + "/checkpoints")) {
    left.push_back(e.path().filename().string());
  }
  EXPECT_EQ(left, std::vector<std::string>{"step_00000004"});  // no .tmp-step_00000008
  const auto resumed = run_trillion(dp2(8, 4) + " --run-dir " + dir + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto cmp = run_trillion("compare " + clean + " " + dir + " --tol 0");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
}

TEST(ShardedBadInput, ATruncatedShardFallsBackToThePreviousCheckpoint) {
  const std::string clean = shared_run(dp2(8, 4));
  const std::string dir = fresh_dir("sharded_truncated_resume");
  ASSERT_EQ(run_trillion(dp2(8, 4) + " --run-dir " + dir + " --stop-after 8").exit_code, 0);
  fs::resize_file(dir + "/checkpoints/step_00000008/params_r00001.bin", 1000);
  const auto resumed = run_trillion(dp2(8, 4) + " --run-dir " + dir + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const std::string events = slurp(dir + "/events.log");
  EXPECT_TRUE(has(events,
                  "step_00000008 is corrupt (params_r00001.bin has 1000 bytes, manifest says "
                  "45376); trying the previous one"))
      << events;
  EXPECT_TRUE(has(events, "resumed from " + dir + "/checkpoints/step_00000004 at step 4"))
      << events;
  const auto cmp = run_trillion("compare " + clean + " " + dir + " --tol 0");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
}

TEST(ShardedBadInput, ACheckpointOfAnotherModelIsOneLine) {
  const std::string other = shared_run(dp2(4, 4) + " --set model.n_layers=1");
  const std::string dir = fresh_dir("sharded_other_model");
  ASSERT_EQ(run_trillion(dp2(4, 4) + " --run-dir " + dir + " --stop-after 2").exit_code, 0);
  fs::copy(other + "/checkpoints/step_00000004", dir + "/checkpoints/step_00000004",
           fs::copy_options::recursive);
  const auto r = run_trillion(dp2(4, 4) + " --run-dir " + dir + " --resume");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "checkpoint '" + dir +
                                "/checkpoints/step_00000004' holds 13408 parameters of 4 bytes "
                                "in other tensors but this model has 22688 of 4: it is a "
                                "checkpoint of a different model config"))
      << r.output;
}

}  // namespace
}  // namespace trillion
