// Inference prefill (plan/prefill.h): exact KV cache and weight bytes, pipeline stages that run
// in turn, the two context-parallel variants, and Yang et al. 2411.01783's published 1M-token
// Llama 3 405B prefill on 128 H100 (77 s) within 15%.
#include "plan/prefill.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace trillion::plan {
namespace {

TEST(Prefill, MemoryIsWeightsKvCacheAndWorkspaceInExactBytes) {
  const ModelSpec& m = find_model("llama3-405b");  // 126 layers, 8 KV heads of 128
  const Gpu& h100 = find_gpu("h100");
  const int64_t S = 1 << 20;
  const PrefillEstimate e = estimate_prefill(m, h100, S, {8, 16, 1, false, Precision::kFp8});
  // This rank's S/cp tokens x 126 layers x K and V of its one KV head x 128 x 2 bytes.
  EXPECT_DOUBLE_EQ(e.kv_cache, (S / 16.0) * 126 * 2 * 1 * 128 * 2);
  // FP8 weights, one byte per parameter, split over TP 8.
  EXPECT_DOUBLE_EQ(e.weights, static_cast<double>(count_model(m).total) / 8);
  EXPECT_DOUBLE_EQ(e.overhead, h100.overhead_bytes);
  EXPECT_GT(e.workspace, 0);
  // Two pipeline stages halve the KV cache and the layer weights but not the time: one
  // sequence passes the stages in turn (plus the send between them).
  const PrefillEstimate p2 = estimate_prefill(m, h100, S, {8, 8, 2, false, Precision::kFp8});
  EXPECT_DOUBLE_EQ(p2.kv_cache, (S / 8.0) * 63 * 2 * 1 * 128 * 2);
  EXPECT_GT(p2.seconds, e.seconds);
  EXPECT_GT(p2.pp_comm, 0);
}

TEST(Prefill, RingHidesWhatAllGatherExposes) {
  const ModelSpec& m = find_model("llama3-405b");
  const Gpu& h100 = find_gpu("h100");
  const PrefillEstimate ring =
      estimate_prefill(m, h100, 1 << 20, {8, 16, 1, false, Precision::kFp8});
  const PrefillEstimate gather =
      estimate_prefill(m, h100, 1 << 20, {8, 16, 1, true, Precision::kFp8});
  EXPECT_EQ(ring.cp_comm, 0);  // every K/V hop travels behind a 4 ms ring step of attention
  EXPECT_GT(gather.cp_comm, 0);
  EXPECT_DOUBLE_EQ(gather.seconds - gather.cp_comm, ring.seconds);
  EXPECT_THROW(estimate_prefill(m, h100, 1000, {8, 16, 1, false, Precision::kFp8}), Error);
  EXPECT_THROW(estimate_prefill(m, h100, 1 << 20, {16, 1, 1, false, Precision::kFp8}), Error);
}

// Yang et al. 2411.01783 (abstract): Llama 3 405B, 1M-token prefill on 128 H100 (16 nodes of
// 8) in 77 s, with FP8 GEMMs; the search picks TP 8 inside a node and CP 16 across nodes.
TEST(Prefill, MillionTokensOnLlama3On128H100WithinFifteenPercentOfYang) {
  const PrefillSearch s = search_prefill(find_model("llama3-405b"), find_gpu("h100"), 128, 1 << 20,
                                         {Precision::kFp8}, 0, 0, 0, -1, 3);
  const PrefillEstimate& best = s.ranked.front();
  EXPECT_EQ(best.layout.tp, 8);
  EXPECT_EQ(best.layout.cp, 16);
  EXPECT_EQ(best.layout.pp, 1);
  EXPECT_NEAR(best.seconds / 77.0, 1.0, 0.15);
  EXPECT_LE(best.memory(), 80e9);
}

}  // namespace
}  // namespace trillion::plan
