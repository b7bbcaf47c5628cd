// plan/document_attention.h: the expected attention work of packed documents. Documents of one
// token see only themselves (T pairs); documents far longer than the window give causal
// attention; a mixed distribution matches, within 1.5%, the visible pairs counted by the
// loader's document starts (the engine's mask) over 400 windows of a sampled stream; `trillion
// plan --document-lengths` prints the fraction for a catalog model and refuses a malformed list.
#include "plan/document_attention.h"

#include <gtest/gtest.h>

#include "../train/cli_util.h"
#include "core/error.h"
#include "core/philox.h"
#include "data/loader.h"

using namespace trillion;

TEST(DocumentAttention, LimitsAreSelfAttentionAndCausal) {
  EXPECT_DOUBLE_EQ(plan::document_visible_pairs({{1}, {1.0}}, 64), 64.0);
  EXPECT_NEAR(plan::document_attention_fraction({{int64_t{1} << 40}, {1.0}}, 64), 1.0, 1e-9);
  // Documents exactly one window long: a window holds the end of one and the start of the next.
  // t + 1 keys at position t of a document that began at the window start, fewer otherwise.
  const double f = plan::document_attention_fraction({{64}, {1.0}}, 64);
  EXPECT_GT(f, 0.5);
  EXPECT_LT(f, 1.0);
  EXPECT_THROW(plan::document_visible_pairs({{0}, {1.0}}, 8), Error);
  EXPECT_THROW(plan::document_visible_pairs({{4, 8}, {1.0}}, 8), Error);
}

TEST(DocumentAttention, MatchesTheEngineMaskOnASampledStream) {
  const plan::DocumentLengths lengths{{8, 40, 200}, {0.5, 0.3, 0.2}};
  const int64_t T = 128, windows = 400;
  // A stream of documents drawn from the distribution, each ending with token 1 (others 0).
  std::vector<int32_t> stream;
  const Philox rng(5, "document-lengths");
  for (int64_t i = 0; static_cast<int64_t>(stream.size()) < (windows + 1) * T; ++i) {
    const double u = rng.uniform(static_cast<uint64_t>(i));
    const int64_t len = u < 0.5 ? 8 : u < 0.8 ? 40 : 200;
    stream.insert(stream.end(), len - 1, 0);
    stream.push_back(1);
  }
  double pairs = 0;
  std::vector<int32_t> starts(T);
  for (int64_t w = 0; w < windows; ++w) {
    // Windows at offsets unrelated to the document boundaries (as the loader cuts a shard).
    const int64_t first = w * T + (w * 37) % T;
    data::document_starts(stream.data() + first, T, 1, starts.data());
    for (int64_t t = 0; t < T; ++t) pairs += static_cast<double>(t - starts[t] + 1);
  }
  const double measured = pairs / static_cast<double>(windows);
  const double predicted = plan::document_visible_pairs(lengths, T);
  EXPECT_NEAR(measured / predicted, 1.0, 0.015) << measured << " vs " << predicted;
  std::printf(
      "[documents 8/40/200 at 0.5/0.3/0.2, T = 128] visible pairs per window: predicted "
      "%.1f, counted %.1f; %.3f of causal\n",
      predicted, measured, plan::document_attention_fraction(lengths, T));
}

TEST(DocumentAttention, PlanPrintsTheFractionForAModel) {
  const auto r =
      trillion::testing::run_trillion("plan --model llama3-8b --seq 128 --document-lengths 1:1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("128.0 visible (query, key) pairs per sequence and head, 0.0155 of "
                          "causal"),  // 128 / (128 * 129 / 2)
            std::string::npos)
      << r.output;
  const auto bad =
      trillion::testing::run_trillion("plan --model llama3-8b --document-lengths 8:0.5,40");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("'40' is not LENGTH:WEIGHT"), std::string::npos) << bad.output;
}

// Context parallelism under the mask: zigzag balances causal attention exactly (documents far
// longer than the window), any split balances documents far shorter than it, and in between
// zigzag stays within 5% where contiguous does not.
TEST(DocumentAttention, ZigzagStaysBalancedUnderDocuments) {
  const int64_t T = 4096;
  const plan::DocumentLengths longer{{40 * T}, {1.0}}, shorter{{16}, {1.0}};
  for (int64_t cp : {2, 4, 8}) {
    EXPECT_NEAR(plan::document_cp_balance(longer, T, cp, true), 1.0, 3e-3) << cp;
    EXPECT_NEAR(plan::document_cp_balance(shorter, T, cp, true), 1.0, 2e-3) << cp;
    EXPECT_NEAR(plan::document_cp_balance(shorter, T, cp, false), 1.0, 1e-2) << cp;
  }
  // Causal contiguous cp 2: the second half holds 3/4 of the work.
  EXPECT_NEAR(plan::document_cp_balance(longer, T, 2, false), 1.5, 0.01);
  // Documents of 512 to 16K tokens around a 4K window: zigzag 1.037-1.048 at cp 2-8, contiguous
  // 1.44-1.71.
  const plan::DocumentLengths mixed{{512, 2048, 8192, 16384}, {0.4, 0.3, 0.2, 0.1}};
  for (int64_t cp : {2, 4, 8}) {
    EXPECT_LT(plan::document_cp_balance(mixed, T, cp, true), 1.05) << cp;
    EXPECT_GT(plan::document_cp_balance(mixed, T, cp, false), 1.4) << cp;
  }
  EXPECT_THROW(plan::document_cp_balance(mixed, 100, 8, true), Error);
}
