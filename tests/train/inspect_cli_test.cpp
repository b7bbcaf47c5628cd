// `trillion inspect`: the parameter count it prints is the one `trillion train` allocates and the
// one `trillion plan` plans with (one table for all three); any layout's local shapes and stages
// come out of the same functions the engine uses, and an impossible layout is refused by name.
#include <gtest/gtest.h>

#include "cli_util.h"

namespace trillion::testing {
namespace {

TEST(Inspect, ParameterCountEqualsTrainAndPlan) {
  const auto inspect = run_trillion("inspect " + config_path("tiny.toml") + " --json", false);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.output;
  const auto j = nlohmann::json::parse(inspect.output);
  const int64_t total = j["parameters"];
  int64_t summed = 0;
  for (const auto& t : j["tensors"]) {
    int64_t n = 1;
    for (int64_t d : t["shape"]) n *= d;
    summed += n;
  }
  EXPECT_EQ(summed, total);

  const std::string dir = fresh_dir("inspect_train");
  ASSERT_EQ(run_trillion("train " + config_path("tiny.toml") + " --run-dir " + dir +
                         " --quiet --set train.steps=1")
                .exit_code,
            0);
  EXPECT_EQ(read_json(dir + "/summary.json")["params"].get<int64_t>(), total);

  const auto plan = run_trillion("plan --model " + config_path("tiny.toml") +
                                     " --cluster h100 --gpus 1 --layout cp=1 --json",
                                 false);
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_EQ(nlohmann::json::parse(plan.output)["model"]["parameters"].get<int64_t>(), total);
}

TEST(Inspect, LayoutsShowLocalShapesStagesAndSlots) {
  const auto r = run_trillion("inspect " + config_path("tiny.toml") +
                                  " --json --set parallel.tp=2 --set parallel.pp=2 --set "
                                  "parallel.dp=2 --set train.grad_accum=4",
                              false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["layout"]["world_size"], 8);
  EXPECT_EQ(j["local_shape"]["batch"], 2);   // micro_batch 4 over dp 2
  EXPECT_EQ(j["local_shape"]["heads"], 2);   // 4 heads over tp 2
  EXPECT_EQ(j["local_shape"]["kv_heads"], 1);
  EXPECT_EQ(j["local_shape"]["ffn"], 32);
  EXPECT_EQ(j["local_shape"]["vocab_rows"], 32);
  for (const auto& t : j["tensors"]) {
    if (t["name"] == "layers.0.attn.wo") {
      EXPECT_EQ(t["shard"]["group"], "tp");
      EXPECT_EQ(t["shard"]["dim"], 1);
      EXPECT_EQ(t["local_shape"], nlohmann::json({32, 16}));
    }
  }
  // Two pipeline stages of one layer each; 1F1B keeps 2 micro-batches in flight on stage 0.
  ASSERT_EQ(j["stages"].size(), 2u);
  EXPECT_EQ(j["stages"][0]["units"], nlohmann::json({0, 1}));
  EXPECT_EQ(j["stages"][1]["units"], nlohmann::json({2, 3}));
  EXPECT_EQ(j["stages"][0]["slots"], 2);
  EXPECT_EQ(j["stages"][1]["slots"], 1);
  // Each pp rank holds its stages' tp shards: together the whole model over tp.
  const auto& per_rank = j["parameters_per_pp_rank"];
  EXPECT_EQ(per_rank[0].get<int64_t>() + per_rank[1].get<int64_t>(),
            (22688 - 2 * 2 * 32 - 32) / 2 + 2 * 2 * 32 + 32);  // norms are replicated

  const auto bad = run_trillion("inspect " + config_path("tiny.toml") + " --set parallel.tp=3");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("parallel.tp = 3 does not divide model.n_heads = 4"),
            std::string::npos)
      << bad.output;
}

}  // namespace
}  // namespace trillion::testing
