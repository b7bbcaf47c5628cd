// Hosts in the mesh (comm/hosts.h): hostfiles are read as Open MPI reads them (slots, comments,
// "# site=S"), ranks map to hosts by slot, a tp group across hosts is refused with the fix, and
// every group kind gets the link class its members imply, and --elastic picks the largest layout
// the hosts left hold. Pure functions: no MPI, no hosts.
#include "comm/hosts.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../train/cli_util.h"
#include "cli/supervisor.h"
#include "comm/device_mesh.h"
#include "core/error.h"

namespace trillion::comm {
namespace {

std::string write_hostfile(const std::string& name, const std::string& text) {
  const auto path =
      std::filesystem::temp_directory_path() / ("trillion_h34_hosts_" + name + ".hostfile");
  std::ofstream(path) << text;
  return path.string();
}

TEST(Hostfile, ReadsSlotsSitesAndComments) {
  const auto path = write_hostfile(
      "read",
      "# made by hosts.sh\n\nh1 slots=2 # site=0\nh2 slots=2 # site=1 addr=10.9.0.2\n  h3\n");
  const auto e = read_hostfile(path);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].host, "h1");
  EXPECT_EQ(e[0].slots, 2);
  EXPECT_EQ(e[1].site, 1);
  EXPECT_EQ(e[1].address, "10.9.0.2");
  EXPECT_EQ(e[2].slots, 1);
  EXPECT_EQ(e[2].site, 0);
}

TEST(Hostfile, ABadLineIsNamed) {
  const auto path = write_hostfile("bad", "h1 slots=2\nh2 slots=two\n");
  try {
    read_hostfile(path);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "hostfile " + path + " line 2: 'h2 slots=two' is not 'host [slots=K]'");
  }
}

TEST(Hostfile, RanksFillEachHostsSlotsInTurn) {
  const auto path = write_hostfile("map", "a slots=2 # site=0\nb slots=2 # site=1\n");
  const JobHosts h = map_ranks_by_slot(read_hostfile(path), 4, path);
  EXPECT_EQ(h.host_of_rank, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(h.names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(h.sites(), 2);
  EXPECT_EQ(h.site_of_rank(3), 1);
  EXPECT_THROW(map_ranks_by_slot(read_hostfile(path), 5, path), Error);
}

// --elastic's choice (cli/supervisor.h): fewest replicas lost, per-rank micro-batch kept, global
// batch kept by accumulation; dp 3 only where the global batch divides.
TEST(Elastic, TheLargestLayoutTheSlotsHoldKeepsTheGlobalBatch) {
  cli::ElasticOptions e;
  e.dp = 4, e.micro_batch = 8, e.grad_accum = 1, e.replica_ranks = 1;
  int64_t mb = 0, ga = 0;
  EXPECT_EQ(cli::elastic_replicas(e, 3, mb, ga), 2);  // 3 would need 8 / 6 accumulation
  EXPECT_EQ(mb, 4);
  EXPECT_EQ(ga, 2);
  e.grad_accum = 3;  // global batch 24 = 3 replicas x 2 x 4
  EXPECT_EQ(cli::elastic_replicas(e, 3, mb, ga), 3);
  EXPECT_EQ(mb, 6);
  EXPECT_EQ(ga, 4);
  e.replica_ranks = 2;  // tp 2: 3 slots hold one replica
  EXPECT_EQ(cli::elastic_replicas(e, 3, mb, ga), 1);
  EXPECT_EQ(cli::elastic_replicas(e, 1, mb, ga), 0);
}

TEST(MeshHosts, TpAcrossHostsIsRefusedWithTheFix) {
  const MeshLayout layout({.dp = 2, .tp = 2});
  const JobHosts one_slot = job_hosts({"a", "b", "c", "d"});
  try {
    check_tp_inside_hosts(layout, one_slot);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "parallel.tp = 2: the tensor-parallel group of ranks 0..1 spans hosts a, b; tp "
              "exchanges activations in every layer and must stay inside one host: give every "
              "host a multiple of 2 slots (hostfile 'slots=K'), or lower parallel.tp");
  }
  EXPECT_NO_THROW(check_tp_inside_hosts(layout, job_hosts({"a", "a", "b", "b"})));
}

TEST(MeshHosts, GroupsGetTheLinkClassOfTheirMembers) {
  // 8 ranks, pp 2 x dp 2 x tp 2, 2 slots per host, hosts {a,b} in site 0 and {c,d} in site 1.
  const MeshLayout layout({.pp = 2, .dp = 2, .tp = 2});
  std::vector<HostfileEntry> entries = {
      {"a", 2, 0, ""}, {"b", 2, 0, ""}, {"c", 2, 1, ""}, {"d", 2, 1, ""}};
  const JobHosts h = map_ranks_by_slot(entries, 8, "test");
  EXPECT_EQ(group_link_class(layout, h, MeshGroup::tp, 0), LinkClass::inside_host);
  EXPECT_EQ(group_link_class(layout, h, MeshGroup::dp, 0), LinkClass::across_hosts);
  EXPECT_EQ(group_link_class(layout, h, MeshGroup::pp, 0), LinkClass::across_sites);
  EXPECT_FALSE(groups_cross_hosts(layout, h, MeshGroup::tp));
  EXPECT_TRUE(groups_cross_hosts(layout, h, MeshGroup::dp));
  // A group with members both on this host and on others is "mixed".
  EXPECT_EQ(link_class_of(h, {0, 1, 2, 3}, 0), LinkClass::mixed);
  EXPECT_EQ(link_class_of(h, {0, 2, 4}, 0), LinkClass::mixed);
}

TEST(InspectHosts, ShowsEachRanksHostAndWhichGroupsCrossAndRefusesTpAcross) {
  const auto path = write_hostfile("inspect", "h1 slots=2 # site=0\nh2 slots=2 # site=1\n");
  const std::string config = trillion::testing::config_path("tiny.toml");
  const auto r = trillion::testing::run_trillion(
      "inspect " + config + " --set parallel.dp=2 --set parallel.tp=2 --hostfile " + path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("2 host(s), 2 site(s)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2      h2                   1        0    1    0    0"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("group dp     crosses hosts (rank 0's group: across_sites)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("group tp     inside hosts (rank 0's group: inside_host)"),
            std::string::npos)
      << r.output;
  const auto one_slot = write_hostfile("inspect1", "h1\nh2\n");
  const auto refused = trillion::testing::run_trillion(
      "inspect " + config + " --set parallel.tp=2 --hostfile " + one_slot);
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.output.find("spans hosts h1, h2"), std::string::npos) << refused.output;
}

}  // namespace
}  // namespace trillion::comm
