// The alpha-beta model of all-reduce (plan/collectives.h) against its closed forms worked by
// hand, against the engine's own programs (comm/algorithms: the planner and the engine must
// count the same bytes), and the cross-data-centre estimate (plan/scale_out.h) against the same
// closed forms, through the library and through `trillion plan`.
#include "plan/collectives.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../train/cli_util.h"
#include "comm/algorithms/program.h"
#include "core/error.h"
#include "plan/scale_out.h"

namespace trillion::plan {
namespace {

Topology two_level() {
  Topology t;
  t.ranks_per_node = 4;
  t.nodes = 2;
  t.intra = {1e-6, 1e11};
  t.inter = {1e-5, 1e10};
  return t;
}

TEST(Collectives, RingOnOneLinkKindIsTheClosedForm) {
  Topology t;
  t.ranks_per_node = 8;
  t.intra = {1e-5, 1e10};
  const CollectiveCost c = all_reduce_cost(AllReduceKind::kRing, 1e9, t);
  EXPECT_DOUBLE_EQ(c.seconds, 2 * 7 * 1e-5 + 2.0 * 7 / 8 * 1e9 / 1e10);  // 0.17514 s
  EXPECT_DOUBLE_EQ(c.bytes_per_rank, 2.0 * 7 / 8 * 1e9);
  EXPECT_EQ(c.steps, 14);
  EXPECT_EQ(c.inter_node_bytes_per_rank, 0);
  const CollectiveCost rs = ring_reduce_scatter_cost(1e9, t);
  EXPECT_DOUBLE_EQ(rs.seconds, 7 * 1e-5 + 7.0 / 8 * 1e9 / 1e10);
  EXPECT_DOUBLE_EQ(rs.bytes_per_rank, 7.0 / 8 * 1e9);
}

TEST(Collectives, HierarchicalBeatsTheRingAcrossSlowLinks) {
  const Topology t = two_level();
  const CollectiveCost h = all_reduce_cost(AllReduceKind::kHierarchical, 1e9, t);
  // in node: 2*3*(1e-6 + 2.5e8/1e11); across: 2*1*(1e-5 + 1.25e8/1e10)
  EXPECT_DOUBLE_EQ(h.seconds, 6 * (1e-6 + 2.5e-3) + 2 * (1e-5 + 1.25e-2));  // 0.040026 s
  EXPECT_DOUBLE_EQ(h.bytes_per_rank, 2.0 * 7 / 8 * 1e9);                    // the ring's total
  EXPECT_DOUBLE_EQ(h.inter_node_bytes_per_rank, 2.0 * 1 / 2 * 1e9 / 4);
  EXPECT_EQ(h.steps, 6 + 2);
  const CollectiveCost r = all_reduce_cost(AllReduceKind::kRing, 1e9, t);
  EXPECT_DOUBLE_EQ(r.seconds, 14 * (1e-5 + 1e9 / 8 / 1e10));  // 0.17514 s: every step is slow
  EXPECT_DOUBLE_EQ(r.inter_node_bytes_per_rank, 2.0 * 7 / 8 * 1e9);
  EXPECT_GT(r.seconds / h.seconds, 4.3);
}

TEST(Collectives, MpiTakesRecursiveDoublingForShortAndRabenseifnerForLongMessages) {
  const Topology t = two_level();  // p = 8: 3 rounds, all on the slow link
  const CollectiveCost tiny = all_reduce_cost(AllReduceKind::kMpi, 8, t);
  EXPECT_DOUBLE_EQ(tiny.seconds, 3 * (1e-5 + 8 / 1e10));
  EXPECT_EQ(tiny.steps, 3);
  const CollectiveCost big = all_reduce_cost(AllReduceKind::kMpi, 1e9, t);
  EXPECT_DOUBLE_EQ(big.seconds, 6 * 1e-5 + 2.0 * 7 / 8 * 1e9 / 1e10);
  EXPECT_EQ(big.steps, 6);
  Topology odd;  // p = 3 rounds up to 2 rounds
  odd.ranks_per_node = 3;
  odd.intra = {1e-5, 1e10};
  EXPECT_DOUBLE_EQ(all_reduce_cost(AllReduceKind::kMpi, 8, odd).seconds, 2 * (1e-5 + 8 / 1e10));
}

TEST(Collectives, GroupsOfOneCostNothingAndBadLinksAreErrors) {
  Topology one;
  EXPECT_EQ(all_reduce_cost(AllReduceKind::kHierarchical, 1e9, one).seconds, 0);
  Topology bad = two_level();
  bad.inter.bytes_per_second = 0;
  EXPECT_THROW(all_reduce_cost(AllReduceKind::kRing, 1e9, bad), Error);
  EXPECT_EQ(parse_all_reduce_kind("hierarchical"), AllReduceKind::kHierarchical);
  EXPECT_THROW(parse_all_reduce_kind("tree"), Error);
}

TEST(Collectives, PlannerBytesAreTheEngineProgramsBytes) {
  // 2 nodes x 4 ranks, 8000 fp32 elements: the engine's programs and the model agree exactly.
  const int64_t count = 8000;
  const double bytes = 4.0 * count;
  Topology t = two_level();
  const CollectiveCost h = all_reduce_cost(AllReduceKind::kHierarchical, bytes, t);
  const CollectiveCost r = all_reduce_cost(AllReduceKind::kRing, bytes, t);
  for (int rank = 0; rank < 8; ++rank) {
    const auto hv = comm::algo::program_volume(
        comm::algo::hierarchical_all_reduce(count, 4, rank % 4, 2, rank / 4));
    EXPECT_DOUBLE_EQ(4.0 * hv.sent, h.bytes_per_rank);
    EXPECT_DOUBLE_EQ(4.0 * hv.sent_on[static_cast<int>(comm::algo::Level::cross)],
                     h.inter_node_bytes_per_rank);
    const auto program = comm::algo::hierarchical_all_reduce(count, 4, rank % 4, 2, rank / 4);
    EXPECT_EQ(static_cast<int>(program.size()), h.steps);
    const auto rv = comm::algo::program_volume(comm::algo::ring_all_reduce(count, 8, rank));
    EXPECT_DOUBLE_EQ(4.0 * rv.sent, r.bytes_per_rank);
    EXPECT_EQ(static_cast<int>(comm::algo::ring_all_reduce(count, 8, rank).size()), r.steps);
  }
}

// --- across data centres ------------------------------------------------------------------

ScaleOutInputs two_datacenters() {
  ScaleOutInputs in;
  in.datacenters = 2;
  in.inter_dc_latency_s = 0.005;
  in.inter_dc_bytes_per_second = 12.5e9;  // 100 Gb/s
  return in;
}

TEST(ScaleOut, SynchronousDpAndDiLoCoAreTheClosedForms) {
  ScaleOutInputs in = two_datacenters();
  in.diloco_inner_steps = 100;
  const double params = 8e9, step = 1.5;
  const ScaleOutEstimate e = estimate_scale_out(in, params, step, 64, 16e6);
  // Synchronous: 2 bytes x 8e9 gradients, ring over 2 sites: 2 x 5 ms + 16e9 / 12.5e9.
  EXPECT_DOUBLE_EQ(e.sync_exchange_seconds, 0.01 + 16e9 / 12.5e9);  // 1.29 s
  EXPECT_DOUBLE_EQ(e.sync_efficiency, 1.5 / (1.5 + 1.29));          // 53.8%
  EXPECT_DOUBLE_EQ(e.sync_bytes_per_step, 16e9);
  // DiLoCo: 4-byte pseudo-gradients every 100 steps.
  EXPECT_DOUBLE_EQ(e.outer_exchange_seconds, 0.01 + 32e9 / 12.5e9);  // 2.57 s
  EXPECT_DOUBLE_EQ(e.diloco_step_seconds, 1.5 + 2.57 / 100);
  EXPECT_NEAR(e.diloco_efficiency, 0.9832, 1e-4);
  EXPECT_DOUBLE_EQ(e.diloco_bytes_per_step, 32e9 / 100);
}

TEST(ScaleOut, StreamingHidesFragmentsThatFitTheirOverlapWindow) {
  ScaleOutInputs in = two_datacenters();
  in.diloco_inner_steps = 100;
  in.diloco_fragments = 4;
  in.diloco_overlap_steps = 2;
  in.outer_bytes_per_parameter = 2;  // bf16
  const ScaleOutEstimate e = estimate_scale_out(in, 8e9, 1.5, 64, 16e6);
  EXPECT_DOUBLE_EQ(e.fragment_bytes, 4e9);
  EXPECT_DOUBLE_EQ(e.outer_exchange_seconds, 0.01 + 4e9 / 12.5e9);  // 0.33 s < 2 x 1.5 s
  EXPECT_EQ(e.outer_exposed_seconds, 0);
  EXPECT_EQ(e.diloco_efficiency, 1);
  EXPECT_DOUBLE_EQ(e.bandwidth_to_hide, 4e9 / (3.0 - 0.01));
  // One inner step of overlap is too short for a slow link: the rest is exposed.
  in.inter_dc_bytes_per_second = 1e9;
  in.diloco_overlap_steps = 1;
  const ScaleOutEstimate slow = estimate_scale_out(in, 8e9, 1.5, 64, 16e6);
  EXPECT_DOUBLE_EQ(slow.outer_exposed_seconds, 4 * (0.01 + 4.0 - 1.5));
}

TEST(ScaleOut, BadInputsNameTheFlag) {
  ScaleOutInputs in = two_datacenters();
  in.diloco_inner_steps = 10;
  in.diloco_fragments = 3;
  try {
    estimate_scale_out(in, 1e9, 1, 64, 1e6);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--diloco-fragments 3"), std::string::npos) << e.what();
  }
  in.diloco_fragments = 1;
  try {
    estimate_scale_out(in, 1e9, 1, 63, 1e6);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dp = 63"), std::string::npos) << e.what();
  }
}

TEST(ScaleOut, PlanCommandPrintsBothEstimatesWithTheirAssumptions) {
  const auto json = trillion::testing::run_trillion(
      "plan --model llama3-8b --cluster h100 --gpus 1024 --datacenters 2 --inter-dc-latency-ms 5 "
      "--inter-dc-gbps 100 --diloco-inner-steps 100 --json",
      false);
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const auto j = nlohmann::json::parse(json.output);
  const auto& s = j["scale_out"];
  const double params = j["model"]["parameters"].get<double>();
  const double step = j["step_seconds"].get<double>();
  EXPECT_DOUBLE_EQ(s["step_seconds"].get<double>(), step);
  EXPECT_NEAR(s["sync_step_seconds"].get<double>(), step + 0.01 + 2 * params / 12.5e9, 1e-9);
  EXPECT_NEAR(s["diloco_step_seconds"].get<double>(), step + (0.01 + 4 * params / 12.5e9) / 100,
              1e-9);
  EXPECT_GT(s["diloco_efficiency"].get<double>(), s["sync_efficiency"].get<double>());
  EXPECT_TRUE(j["assumptions"].contains("DiLoCo"));
  const auto text = trillion::testing::run_trillion(
      "plan --model llama3-8b --cluster h100 --gpus 1024 --datacenters 2 --diloco-inner-steps 100 "
      "--noise-scale-tokens 4e6",
      false);
  ASSERT_EQ(text.exit_code, 0);
  EXPECT_NE(text.output.find("DiLoCo H=100"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("Critical batch (measured noise scale): 4e+06 tokens"),
            std::string::npos)
      << text.output;
}

}  // namespace
}  // namespace trillion::plan
