// Model catalog and counts: dense specs agree exactly with the engine's transformer_cost, and
// the catalog's totals match the published parameter counts; Chinchilla's Table 3; layouts.
#include <gtest/gtest.h>

#include "core/error.h"
#include "plan/hardware.h"
#include "plan/layout.h"
#include "plan/model_spec.h"

namespace trillion::plan {
namespace {

TEST(Models, DenseCountsEqualTheEnginesCostModel) {
  for (const char* name : {"llama3-8b", "llama3-70b", "llama3-405b"}) {
    const ModelSpec& m = find_model(name);
    const DenseShape shape = dense_shape(m);
    const ParameterCount p = count_parameters(shape);
    const ModelCounts c = count_model(m);
    EXPECT_EQ(c.total, p.total) << name;
    EXPECT_EQ(c.activated, p.total) << name;
    for (int64_t seq : {2048, 8192, 131072})
      EXPECT_DOUBLE_EQ(model_flops_per_token(m, seq, false), training_flops_per_token(shape, seq));
    // And back: an engine config round-trips to the same counts.
    EXPECT_EQ(count_model(model_spec_from_dense(shape, 8192)).total, p.total);
  }
}

TEST(Models, CatalogMatchesPublishedSizes) {
  auto billions = [](const char* name) { return count_model(find_model(name)).total / 1e9; };
  EXPECT_NEAR(billions("llama3-8b"), 8.0, 0.1);
  EXPECT_NEAR(billions("llama3-70b"), 70.6, 0.1);
  EXPECT_NEAR(billions("llama3-405b"), 405.9, 0.1);                                // "405B"
  EXPECT_NEAR(billions("gpt3-175b"), 174.6, 0.1);                                  // "175B"
  EXPECT_NEAR(billions("deepseek-v3"), 671.0, 1.0);                                // 671B total ...
  EXPECT_NEAR(count_model(find_model("deepseek-v3")).activated / 1e9, 37.5, 0.6);  // 37B active
  EXPECT_NEAR(billions("moe-2t"), 1994, 1);
  EXPECT_NEAR(count_model(find_model("moe-2t")).activated / 1e9, 87.4, 0.1);
  // Causal attention counts half of PaLM's 12 L h s.
  const ModelSpec& m = find_model("llama3-405b");
  EXPECT_DOUBLE_EQ(model_flops_per_token(m, 8192, false) - model_flops_per_token(m, 8192, true),
                   6.0 * 126 * 16384 * 8192);
  EXPECT_THROW(find_model("llama5"), Error);
  EXPECT_THROW(dense_shape(find_model("deepseek-v3")), Error);
}

TEST(Models, ChinchillaTable3) {
  EXPECT_NEAR(chinchilla_tokens(1e9) / 20.2e9, 1.0, 0.01);
  EXPECT_NEAR(chinchilla_tokens(1e12) / 21.2e12, 1.0, 0.01);
  EXPECT_NEAR(chinchilla_tokens(2e12) / 42.4e12, 1.0, 0.01);
}

TEST(Hardware, CatalogHasTheNamedClusters) {
  EXPECT_DOUBLE_EQ(find_gpu("h100").bf16_flops, 989e12);
  EXPECT_DOUBLE_EQ(find_gpu("h800").fp8_flops, 1979e12);
  EXPECT_DOUBLE_EQ(find_gpu("h200").hbm_bytes, 141e9);
  EXPECT_EQ(find_gpu("gb200-nvl72").nvlink_domain, 72);
  EXPECT_DOUBLE_EQ(find_gpu("gb200-nvl72").fp4_flops, 10000e12);
  EXPECT_DOUBLE_EQ(find_gpu("a100").fp8_flops, 0);
  EXPECT_GT(find_gpu("b200").bf16_flops, 0);
  EXPECT_THROW(find_gpu("tpu"), Error);
}

TEST(Layouts, ParseAndPrint) {
  LayoutFields f;
  const Layout l = parse_layout(
      "tp=8,pp=16,cp=2,dp=64,schedule=interleaved,chunks=4,"
      "recompute=selective,precision=fp8,zero=2,mb=2",
      &f);
  EXPECT_EQ(l.gpus(), 8L * 16 * 2 * 64);
  EXPECT_TRUE(f.tp && f.pp && f.cp && f.dp && f.schedule && f.chunks && f.micro_batch);
  EXPECT_FALSE(f.ep);
  EXPECT_EQ(l.micro_batch, 2);
  EXPECT_EQ(l.to_string(),
            "tp=8,pp=16,cp=2,ep=1,dp=64,zero=2,schedule=interleaved,chunks=4,"
            "recompute=selective,micro_batch=2,precision=fp8");
  EXPECT_THROW(parse_layout("tp=x"), Error);
  EXPECT_THROW(parse_layout("tq=8"), Error);
  EXPECT_THROW(parse_layout("zero=4"), Error);
  EXPECT_THROW(parse_layout("schedule=zigzag"), Error);
  EXPECT_THROW(parse_layout("tp8"), Error);
}

}  // namespace
}  // namespace trillion::plan
