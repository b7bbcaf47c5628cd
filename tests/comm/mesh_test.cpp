// DeviceMesh: the worked 16-rank example of device_mesh.h checked group by group, coordinates
// round-tripping, validation messages, and (under mpirun with 4 ranks) real group communicators
// whose collectives reduce over exactly the group's members, with per-group counters.
#include <gtest/gtest.h>

#include <vector>

#include "comm/device_mesh.h"
#include "core/error.h"
#include "mpi_env.h"

namespace trillion::comm {
namespace {

using V = std::vector<int>;

TEST(MeshLayout, WorkedSixteenRankExample) {
  const MeshLayout m({.pp = 2, .dp = 2, .cp = 2, .tp = 2, .ep = 2});
  EXPECT_EQ(m.rank_of({.pp = 1, .dp = 0, .cp = 1, .tp = 1}), 11);
  EXPECT_EQ(m.coord_of(6), (MeshCoord{.pp = 0, .dp = 1, .cp = 1, .tp = 0}));
  for (int r = 0; r < 16; ++r) EXPECT_EQ(m.rank_of(m.coord_of(r)), r);
  EXPECT_EQ(m.group_ranks(MeshGroup::tp, 2), (V{2, 3}));
  EXPECT_EQ(m.group_ranks(MeshGroup::cp, 5), (V{5, 7}));
  EXPECT_EQ(m.group_ranks(MeshGroup::dp, 10), (V{10, 14}));
  EXPECT_EQ(m.group_ranks(MeshGroup::pp, 3), (V{3, 11}));
  EXPECT_EQ(m.group_ranks(MeshGroup::dp_cp, 9), (V{9, 11, 13, 15}));
  EXPECT_EQ(m.group_ranks(MeshGroup::ep, 0), (V{0, 2}));
  EXPECT_EQ(m.group_ranks(MeshGroup::ep, 6), (V{4, 6}));
  EXPECT_EQ(m.group_ranks(MeshGroup::ep, 12), (V{12, 14}));
  EXPECT_EQ(m.group_ranks(MeshGroup::edp, 2), (V{2, 6}));
  EXPECT_EQ(m.group_ranks(MeshGroup::edp, 1), (V{1, 5}));
  // Every group kind partitions the 16 ranks into groups of its degree.
  const std::pair<MeshGroup, int> sizes[] = {
      {MeshGroup::tp, 2},    {MeshGroup::cp, 2}, {MeshGroup::dp, 2}, {MeshGroup::pp, 2},
      {MeshGroup::dp_cp, 4}, {MeshGroup::ep, 2}, {MeshGroup::edp, 2}};
  for (const auto& [g, size] : sizes) {
    std::vector<int> seen(16, 0);
    for (int r = 0; r < 16; ++r) {
      const V members = m.group_ranks(g, r);
      EXPECT_EQ(static_cast<int>(members.size()), size) << group_name(g);
      for (int x : members) seen[x] += 1;
    }
    for (int r = 0; r < 16; ++r) EXPECT_EQ(seen[r], size) << group_name(g) << " rank " << r;
  }
}

// MoE layers whose tp ranks hold whole experts (parallel.expert_tp = 1): the ep group takes the
// tp ranks of its dp x cp positions in, ep-major; edp is unchanged.
TEST(MeshLayout, ExpertsOverTpSpanTheTpRanks) {
  const MeshLayout m({.pp = 2, .dp = 2, .cp = 2, .tp = 2, .ep = 2, .experts_over_tp = true});
  EXPECT_EQ(m.group_ranks(MeshGroup::ep, 0), (V{0, 1, 2, 3}));
  EXPECT_EQ(m.group_ranks(MeshGroup::ep, 6), (V{4, 5, 6, 7}));
  EXPECT_EQ(m.group_ranks(MeshGroup::ep, 13), (V{12, 13, 14, 15}));
  EXPECT_EQ(m.group_ranks(MeshGroup::edp, 2), (V{2, 6}));
  EXPECT_EQ(m.group_ranks(MeshGroup::edp, 1), (V{1, 5}));
  const MeshLayout flat({.dp = 2, .tp = 2, .ep = 1, .experts_over_tp = true});
  EXPECT_EQ(flat.group_ranks(MeshGroup::ep, 3), (V{2, 3}));  // ep 1: the tp group
  EXPECT_EQ(flat.group_ranks(MeshGroup::edp, 1), (V{1, 3}));
  EXPECT_THROW(
      validate_mesh({.dp = 2, .tp = 4, .ep = 2, .experts_over_tp = true}, 8, {.n_experts = 4}),
      Error);
}

std::string message_of(const MeshShape& s, int world, const MeshLimits& l) {
  try {
    validate_mesh(s, world, l);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MeshLayout, ValidationNamesValuesAndFixes) {
  const MeshLimits l{.n_heads = 4,
                     .n_kv_heads = 2,
                     .n_layers = 2,
                     .micro_batch = 4,
                     .seq_len = 32,
                     .n_experts = 0};
  EXPECT_EQ(message_of({.dp = 4}, 4, l), "");
  const std::string world = message_of({.dp = 2}, 4, l);
  EXPECT_NE(world.find("the job has 4 process(es) but pp*dp*cp*tp = 1*2*1*1 = 2"),
            std::string::npos)
      << world;
  const std::string kv = message_of({.tp = 4}, 4, l);
  EXPECT_NE(kv.find("parallel.tp = 4 does not divide model.n_kv_heads = 2"), std::string::npos)
      << kv;
  const std::string batch = message_of({.dp = 8}, 8, l);
  EXPECT_NE(batch.find("parallel.dp = 8 does not divide train.micro_batch = 4"), std::string::npos)
      << batch;
  EXPECT_NE(message_of({.pp = 4}, 4, l).find("model.n_layers = 2"), std::string::npos);
  EXPECT_NE(message_of({.dp = 2, .ep = 4}, 2, l).find("parallel.ep = 4 must divide dp*cp = 2"),
            std::string::npos);
  EXPECT_NE(message_of({.dp = 0}, 0, l).find("parallel.dp = 0 must be at least 1"),
            std::string::npos);
}

TEST(MpiMesh, GroupCommunicatorsReduceOverTheirMembers) {
  REQUIRE_MPI(4);
  Communicator& world = *testing::mpi_world();
  if (world.size() != 4) GTEST_SKIP() << "written for 4 ranks";
  DeviceMesh mesh(world, {.pp = 1, .dp = 2, .cp = 1, .tp = 2});  // tp {0,1} {2,3}; dp {0,2} {1,3}
  const int r = world.rank();
  EXPECT_EQ(mesh.coord(), (MeshCoord{.pp = 0, .dp = r / 2, .cp = 0, .tp = r % 2}));
  EXPECT_EQ(mesh.group(MeshGroup::tp).size(), 2);
  EXPECT_EQ(mesh.group(MeshGroup::tp).rank(), r % 2);
  EXPECT_EQ(mesh.group(MeshGroup::dp).rank(), r / 2);
  EXPECT_EQ(mesh.group(MeshGroup::pp).size(), 1);
  std::vector<double> v = {static_cast<double>(1 << r)};  // bit r marks rank r
  mesh.group(MeshGroup::tp).all_reduce(Tensor(v.data(), DType::f64, {1}));
  EXPECT_EQ(v[0], r < 2 ? 3.0 : 12.0);
  v[0] = static_cast<double>(1 << r);
  mesh.group(MeshGroup::dp).all_reduce(Tensor(v.data(), DType::f64, {1}));
  EXPECT_EQ(v[0], r % 2 == 0 ? 5.0 : 10.0);
  // 8 bytes over a group of 2: ring all-reduce sends 2 * (2-1)/2 * 8 = 8 bytes per group.
  EXPECT_EQ(mesh.group(MeshGroup::tp).counters().sent(Collective::all_reduce), 8u);
  EXPECT_EQ(mesh.group(MeshGroup::dp).counters().sent(Collective::all_reduce), 8u);
  EXPECT_EQ(mesh.group(MeshGroup::cp).counters().total_sent(), 0u);
  EXPECT_EQ(mesh.total_counters().count(Collective::all_reduce),
            world.counters().count(Collective::all_reduce) + 2);
  EXPECT_THROW(DeviceMesh(world, {.dp = 3}), Error);  // 3 != 4 ranks, before any split
}

}  // namespace
}  // namespace trillion::comm
