// The sharded checkpoint format (train/checkpoint/checkpoint.h) without a job: two "ranks" own
// interleaved runs of a 1000-element model, each writes its shard files, the lead seals. Asserts
// exact file sizes (each rank's elements x 4 bytes, moments twice that), that any range reads back
// the values its owner wrote (also across shard boundaries), that runs that do not tile the model
// are refused at commit, and that a truncated shard, a shard missing from the manifest and a layout
// whose ranges overlap each make the checkpoint corrupt with one message naming the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cli_util.h"
#include "core/error.h"
#include "train/checkpoint/checkpoint.h"

using namespace trillion;
using namespace trillion::testing;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kElements = 1000;

// The model's values: parameter i is i, its moments i + 0.25 and i + 0.5.
struct Model {
  std::vector<float> p, m, v;
  Model() {
    for (int64_t i = 0; i < kElements; ++i) {
      p.push_back(static_cast<float>(i));
      m.push_back(static_cast<float>(i) + 0.25f);
      v.push_back(static_cast<float>(i) + 0.5f);
    }
  }
  ShardRun run(int64_t global, int64_t length, bool moments = true) const {
    return {global, length, p.data() + global, moments ? m.data() + global : nullptr,
            moments ? v.data() + global : nullptr};
  }
};

// Rank 0 owns [0,100) [300,600) [900,1000); rank 1 owns [100,300) [600,900), written out of
// global order to show the file order is the rank's own.
std::string write_two_ranks(const std::string& run, const Model& model, int64_t step = 2,
                            bool rank1_moments = true) {
  const std::string tmp = begin_sharded_checkpoint(run, step);
  write_checkpoint_shard(tmp, 0, {model.run(300, 300), model.run(0, 100), model.run(900, 100)}, 4);
  write_checkpoint_shard(
      tmp, 1, {model.run(100, 200, rank1_moments), model.run(600, 300, rank1_moments)}, 4);
  ShardedLayout layout{2, kElements, 4, 1234, {{"dp", 2}, {"zero", 3}}};
  CheckpointContents c{nullptr, nullptr, nullptr, {step, step, 64, 7}, "[model]\n", {}};
  return commit_sharded_checkpoint(run, tmp, layout, c, 5);
}

void spit(const fs::path& file, const std::string& bytes) {
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
}

std::vector<float> read(const CheckpointReader& r, CheckpointReader::Part part, int64_t at,
                        int64_t n) {
  std::vector<float> out(n);
  r.read(part, at, n, out.data());
  return out;
}

TEST(ShardedCheckpoint, EachRankWritesOnlyItsElements) {
  const std::string run = fresh_dir("sharded_sizes");
  const Model model;
  const std::string dir = write_two_ranks(run, model);
  EXPECT_EQ(fs::file_size(dir + "/params_r00000.bin"), 500u * 4);
  EXPECT_EQ(fs::file_size(dir + "/params_r00001.bin"), 500u * 4);
  EXPECT_EQ(fs::file_size(dir + "/optimizer_r00000.bin"), 2 * 500u * 4);
  EXPECT_EQ(fs::file_size(dir + "/optimizer_r00001.bin"), 2 * 500u * 4);
  EXPECT_FALSE(fs::exists(dir + "/params.bin"));
  EXPECT_FALSE(fs::exists(dir + "/shard_r00000.json"));  // merged into layout.json
  EXPECT_EQ(verify_checkpoint(dir), std::nullopt);
  const nlohmann::json layout = nlohmann::json::parse(slurp(dir + "/layout.json"));
  EXPECT_EQ(layout["elements"], kElements);
  EXPECT_EQ(layout["writer"]["zero"], 3);
  // Rank 0's [300,600) then [0,100) then [900,1000): no two continue each other.
  EXPECT_EQ(layout["shards"][0]["ranges"].dump(), "[[300,300],[0,100],[900,100]]");
  // Rank 1's two runs are not adjacent either.
  EXPECT_EQ(layout["shards"][1]["ranges"].dump(), "[[100,200],[600,300]]");
}

TEST(ShardedCheckpoint, AnyRangeReadsBackWhatItsOwnerWrote) {
  const std::string run = fresh_dir("sharded_read");
  const Model model;
  const CheckpointReader r(write_two_ranks(run, model));
  EXPECT_EQ(r.elements(), kElements);
  EXPECT_EQ(r.state().step, 2);
  EXPECT_EQ(r.model_fingerprint(), 1234u);
  using Part = CheckpointReader::Part;
  // [50, 950) crosses every boundary of both shards.
  const auto p = read(r, Part::params, 50, 900), m = read(r, Part::first_moment, 50, 900),
             v = read(r, Part::second_moment, 50, 900);
  for (int64_t i = 0; i < 900; ++i) {
    ASSERT_EQ(p[i], model.p[50 + i]) << i;
    ASSERT_EQ(m[i], model.m[50 + i]) << i;
    ASSERT_EQ(v[i], model.v[50 + i]) << i;
  }
  EXPECT_EQ(read(r, Part::params, 999, 1)[0], 999.0f);
  // The whole model through the same path `trillion compare` uses.
  const CheckpointWeights w = read_checkpoint_weights(run + "/checkpoints/step_00000002");
  ASSERT_EQ(w.bytes.size(), kElements * 4u);
  EXPECT_EQ(std::memcmp(w.bytes.data(), model.p.data(), w.bytes.size()), 0);
}

TEST(ShardedCheckpoint, AMissingMomentIsWrittenAsZeros) {
  const std::string run = fresh_dir("sharded_zeros");
  const Model model;
  const CheckpointReader r(write_two_ranks(run, model, 2, false));
  const auto m = read(r, CheckpointReader::Part::first_moment, 100, 200);
  for (float x : m) ASSERT_EQ(x, 0.0f);
  EXPECT_EQ(read(r, CheckpointReader::Part::first_moment, 99, 1)[0], 99.25f);
}

TEST(ShardedCheckpoint, RunsThatDoNotTileTheModelAreRefusedAndLeaveNothing) {
  const std::string run = fresh_dir("sharded_overlap");
  const Model model;
  const std::string tmp = begin_sharded_checkpoint(run, 4);
  write_checkpoint_shard(tmp, 0, {model.run(0, 600)}, 4);
  write_checkpoint_shard(tmp, 1, {model.run(500, 500)}, 4);  // [500, 600) twice
  ShardedLayout layout{2, kElements, 4, 1, {}};
  CheckpointContents c{nullptr, nullptr, nullptr, {4, 4, 0, 7}, "", {}};
  try {
    commit_sharded_checkpoint(run, tmp, layout, c, 5);
    FAIL() << "overlapping runs were committed";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "checkpoint of step 4 not written")) << e.what();
    EXPECT_TRUE(has(e.what(), "do not tile the model (a run at 500 where 600 was expected)"))
        << e.what();
  }
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_TRUE(list_checkpoints(run).empty());
}

TEST(ShardedCheckpoint, ATruncatedShardIsCorruptAndNamed) {
  const std::string run = fresh_dir("sharded_truncated");
  const Model model;
  const std::string dir = write_two_ranks(run, model);
  fs::resize_file(dir + "/params_r00001.bin", 1000);
  EXPECT_EQ(verify_checkpoint(dir), "params_r00001.bin has 1000 bytes, manifest says 2000");
}

// A crafted checkpoint whose manifest matches its files, but whose layout does not: each is
// caught by the layout's own checks, naming what is wrong.
TEST(ShardedCheckpoint, ALayoutThatDoesNotCheckIsCorrupt) {
  const Model model;
  auto rewrite_layout = [](const std::string& dir, auto&& edit) {
    nlohmann::json layout = nlohmann::json::parse(slurp(dir + "/layout.json"));
    edit(layout);
    const std::string text = layout.dump();
    spit(dir + "/layout.json", text);
    nlohmann::json m = nlohmann::json::parse(slurp(dir + "/manifest.json"));
    m["layout.json"] = {{"bytes", text.size()}, {"xxh64", XXH64(text.data(), text.size(), 0)}};
    spit(dir + "/manifest.json", m.dump(2));
  };
  {
    const std::string dir = write_two_ranks(fresh_dir("sharded_overlap_read"), model);
    rewrite_layout(dir, [](nlohmann::json& l) { l["shards"][1]["ranges"][0] = {50, 200}; });
    // The shard still holds 500 elements, so the sizes check; the ranges overlap.
    EXPECT_EQ(verify_checkpoint(dir),
              "layout.json: the shards' ranges overlap at element 100 of 1000");
  }
  {
    const std::string dir = write_two_ranks(fresh_dir("sharded_foreign_shard"), model);
    rewrite_layout(dir, [](nlohmann::json& l) { l["shards"][1]["params"] = "params_r00007.bin"; });
    EXPECT_EQ(verify_checkpoint(dir),
              "layout.json shard 1 names 'params_r00007.bin', which manifest.json does not list");
  }
  {
    const std::string dir = write_two_ranks(fresh_dir("sharded_short_ranges"), model);
    rewrite_layout(dir, [](nlohmann::json& l) { l["shards"][1]["ranges"][1] = {600, 299}; });
    EXPECT_EQ(verify_checkpoint(dir),
              "params_r00001.bin has 2000 bytes and optimizer_r00001.bin 4000, but its ranges "
              "hold 499 elements of 4 bytes (a truncated or foreign shard)");
  }
  {
    const std::string dir = write_two_ranks(fresh_dir("sharded_bad_range"), model);
    rewrite_layout(dir, [](nlohmann::json& l) { l["shards"][0]["ranges"][0] = "300"; });
    EXPECT_EQ(verify_checkpoint(dir),
              "layout.json shard 0: a range is not [global offset, positive length]");
  }
}

}  // namespace
