// The blocks kept in bf16 under the fp4 recipes (precision/bf16_blocks.h, issue 14): each
// recipe's rule scaled to several depths (L = 62 is NVIDIA's 12B model: first 2, last 8; L = 52
// its 8B MXFP4 comparison: last 8), the [precision] bf16_blocks text and its refusals, and the
// GEMMs: a kept block's forward, dgrad and wgrad are the bf16 recipe's bitwise, every other
// block's (and a GEMM outside any block) the fp4 recipe's bitwise.
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "model/linear_gemm.h"

namespace trillion {
namespace {

using precision::Bf16Blocks;
using precision::GemmPass;
using precision::recipe_named;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(PrecisionBf16Blocks, EachRecipesRuleScaledToTheDepth) {
  struct Row {
    int64_t layers;
    Bf16Blocks nvfp4, mxfp4;
  };
  // nvfp4: round(2L/62) first, round(8L/62) last; mxfp4: round(8L/52) last (halves up).
  const std::vector<Row> rows = {
      {1, {0, 0}, {0, 0}},  {2, {0, 0}, {0, 0}},   {3, {0, 0}, {0, 0}},    {4, {0, 1}, {0, 1}},
      {8, {0, 1}, {0, 1}},  {16, {1, 2}, {0, 2}},  {20, {1, 3}, {0, 3}},   {32, {1, 4}, {0, 5}},
      {52, {2, 7}, {0, 8}}, {62, {2, 8}, {0, 10}}, {80, {3, 10}, {0, 12}}, {126, {4, 16}, {0, 19}},
  };
  for (const Row& r : rows) {
    EXPECT_EQ(precision::resolve_bf16_blocks(recipe_named("nvfp4"), r.layers, ""), r.nvfp4)
        << "L = " << r.layers;
    EXPECT_EQ(precision::resolve_bf16_blocks(recipe_named("mxfp4"), r.layers, ""), r.mxfp4)
        << "L = " << r.layers;
    for (const char* name : {"fp32", "bf16", "fp8"}) {
      EXPECT_TRUE(precision::resolve_bf16_blocks(recipe_named(name), r.layers, "").none()) << name;
    }
  }
  // Global layer indices: L = 62 under nvfp4 keeps 0, 1 and 54..61.
  const Bf16Blocks b = precision::resolve_bf16_blocks(recipe_named("nvfp4"), 62, "");
  std::vector<int64_t> kept;
  for (int64_t l = -1; l < 62; ++l) {
    if (precision::in_bf16_blocks(b, l, 62)) kept.push_back(l);
  }
  EXPECT_EQ(kept, (std::vector<int64_t>{0, 1, 54, 55, 56, 57, 58, 59, 60, 61}));
  EXPECT_EQ(precision::describe_bf16_blocks(b, 62), "blocks 0-1 and 54-61 (10 of 62)");
  EXPECT_EQ(precision::describe_bf16_blocks({0, 1}, 4), "block 3 (1 of 4)");
  EXPECT_EQ(precision::describe_bf16_blocks({}, 2), "none of 2 blocks");
}

TEST(PrecisionBf16Blocks, TheConfigTextOverridesAndBadValuesAreRefused) {
  EXPECT_EQ(precision::parse_bf16_blocks("first:2,last:8"), (Bf16Blocks{2, 8}));
  EXPECT_EQ(precision::parse_bf16_blocks("last:3,first:1"), (Bf16Blocks{1, 3}));
  EXPECT_EQ(precision::parse_bf16_blocks("last:1"), (Bf16Blocks{0, 1}));
  EXPECT_EQ(precision::parse_bf16_blocks("first:0"), (Bf16Blocks{0, 0}));
  EXPECT_EQ(precision::parse_bf16_blocks("none"), (Bf16Blocks{0, 0}));
  EXPECT_EQ(precision::bf16_blocks_text({2, 8}), "first:2,last:8");
  const precision::Recipe& nv = recipe_named("nvfp4");
  EXPECT_EQ(precision::resolve_bf16_blocks(nv, 2, "last:1"), (Bf16Blocks{0, 1}));
  EXPECT_EQ(precision::resolve_bf16_blocks(nv, 62, "none"), (Bf16Blocks{0, 0}));
  EXPECT_EQ(precision::resolve_bf16_blocks(recipe_named("fp8"), 4, "first:1,last:2"),
            (Bf16Blocks{1, 2}));
  EXPECT_EQ(precision::resolve_bf16_blocks(recipe_named("bf16"), 4, "none"), (Bf16Blocks{}));
  const auto refused = [&](const std::string& text, const std::string& recipe, int64_t layers) {
    return error_of([&] { precision::resolve_bf16_blocks(recipe_named(recipe), layers, text); });
  };
  std::string e = refused("first:x", "nvfp4", 4);
  EXPECT_TRUE(has(e,
                  "bf16_blocks = \"first:x\": 'x' is not a whole number; expected "
                  "\"first:N,last:M\""))
      << e;
  EXPECT_TRUE(has(refused("middle:2", "nvfp4", 4), "unknown part 'middle'"));
  EXPECT_TRUE(has(refused("first:1,first:2", "nvfp4", 4), "'first' is given twice"));
  EXPECT_TRUE(has(refused("last", "nvfp4", 4), "'last' has no ':'"));
  EXPECT_TRUE(has(refused("last:", "nvfp4", 4), "needs a count of blocks"));
  EXPECT_TRUE(has(refused("first:-1", "nvfp4", 4), "'-1' is not a whole number"));
  EXPECT_EQ(refused("", "nvfp4", 4), "");  // "": the recipe's rule
  e = refused("first:2,last:3", "nvfp4", 4);
  EXPECT_TRUE(has(e, "keeps 5 blocks in bf16, but the model has 4 (model.n_layers)")) << e;
  e = refused("last:1", "fp32", 4);
  EXPECT_TRUE(has(e, "needs a block-scaled recipe (fp8, mxfp4, nvfp4), but 'fp32'") &&
              has(e, "set it to \"none\""))
      << e;
  EXPECT_TRUE(has(refused("first:1", "bf16", 4), "but 'bf16'"));
}

std::vector<float> gaussian(int64_t n, uint64_t seed, float scale = 1.0f) {
  const Philox rng(seed, "bf16-blocks-test");
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(rng.normal(i));
  return v;
}

Tensor view(std::vector<float>& v, int64_t rows, int64_t cols) {
  return Tensor(v.data(), DType::f32, {rows, cols});
}

// Forward, dgrad and wgrad (beta 1) of one linear layer through `lp` as block `layer`, in the
// order a layer runs them, after begin_step(3).
std::vector<std::vector<float>> three_gemms(Backend& be, LinearPrecision& lp, int64_t layer) {
  const int64_t N = 64, I = 48, O = 32;
  std::vector<float> x = gaussian(N * I, 1), w = gaussian(O * I, 2, 0.05f);
  std::vector<float> dy = gaussian(N * O, 3, 1e-3f);
  std::vector<float> y(N * O), dx(N * I), dw(O * I, 0.25f);
  lp.begin_step(3);
  lp.gemm(be, GemmPass::forward, view(y, N, O), false, true, view(x, N, I), view(w, O, I), 1, 0,
          layer);
  lp.gemm(be, GemmPass::dgrad, view(dx, N, I), false, false, view(dy, N, O), view(w, O, I), 1, 0,
          layer);
  lp.gemm(be, GemmPass::wgrad, view(dw, O, I), true, false, view(dy, N, O), view(x, N, I), 1, 1,
          layer);
  return {y, dx, dw};
}

// nvfp4 on a 4-block model keeping blocks 0 and 3: those run the bf16 recipe, 1, 2 and a GEMM
// outside any block nvfp4's (its stochastic rounding included), each bitwise. Both the
// emulation and oneDNN (where the CPU has native bf16) are the bf16 recipe's own paths.
TEST(LinearGemm, Bf16BlocksAreTheBf16RecipesGemmsAndTheOthersTheFp4Recipes) {
  for (const char* onednn : {"0", "1"}) {
    setenv("TRILLION_ONEDNN", onednn, 1);
    MemoryTracker tracker;
    std::unique_ptr<Backend> be = make_cpu_backend(tracker);
    for (const char* name : {"nvfp4", "mxfp4"}) {
      LinearPrecision kept(recipe_named(name), 7, Bf16Blocks{1, 1}, 4);
      EXPECT_TRUE(kept.in_bf16(0) && kept.in_bf16(3));
      EXPECT_FALSE(kept.in_bf16(1) || kept.in_bf16(2) || kept.in_bf16(kNoLayer));
      for (int64_t layer : std::vector<int64_t>{kNoLayer, 0, 1, 2, 3}) {
        const bool bf16 = layer == 0 || layer == 3;
        LinearPrecision ref(recipe_named(bf16 ? "bf16" : name), 7);
        const auto got = three_gemms(*be, kept, layer);
        const auto want = three_gemms(*be, ref, kNoLayer);
        for (size_t pass = 0; pass < 3; ++pass) {
          EXPECT_EQ(got[pass], want[pass])
              << name << " layer " << layer << " pass " << pass << " oneDNN " << onednn;
        }
        LinearPrecision other(recipe_named(bf16 ? name : "bf16"), 7);
        EXPECT_NE(got[0], three_gemms(*be, other, kNoLayer)[0]) << name << " layer " << layer;
      }
    }
  }
  unsetenv("TRILLION_ONEDNN");
}

}  // namespace
}  // namespace trillion
