// Explicit collective algorithms (comm/algorithms) and the link emulator.
// Program.*: the ring and hierarchical programs of all ranks executed together in memory (no
// MPI): every rank ends with the exact sum, no schedule deadlocks, and the per-rank byte counts
// are the closed forms of program.h.
// MpiAlgorithms.* (under mpirun with 2, 3 and 4 ranks): AlgorithmCommunicator against
// MPI_Allreduce (fp32 within 1e-6 relative), bitwise equal across runs and across ranks, for odd
// sizes and every node split of the group; counters exact; non-blocking operations waited in any
// order; the link emulator's delays (lower bounds only: sleeping guarantees them) and its
// cross-site byte count; DeviceMesh wrapping its groups without their users knowing.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <tuple>
#include <vector>

#include "../train/cli_util.h"
#include "comm/algorithms/algorithm_communicator.h"
#include "comm/device_mesh.h"
#include "comm/link_emulator.h"
#include "core/error.h"
#include "core/philox.h"
#include "mpi_env.h"

namespace trillion::comm {
namespace {

using algo::Level;
using algo::Program;
using algo::Span;
using testing::mpi_world;

// --- the programs, all ranks in one process ---------------------------------------------------

// Group rank of a member of `level` seen from group rank `me`, with nodes of m consecutive ranks.
int group_rank_of(Level level, int me, int peer, int m) {
  switch (level) {
    case Level::ring:
      return peer;
    case Level::node:
      return (me / m) * m + peer;
    case Level::cross:
      return peer * m + me % m;
  }
  return -1;
}

// Runs every rank's program: a send is a snapshot taken when its step starts, a step ends when its
// receive has arrived. Returns false if the programs deadlock.
bool run_programs(std::vector<Program>& programs, std::vector<std::vector<double>>& buffers,
                  int m) {
  const int n = static_cast<int>(programs.size());
  std::map<std::tuple<int, int, int>, std::deque<std::vector<double>>> channels;
  std::vector<size_t> next(n, 0);
  std::vector<bool> posted(n, false);
  while (true) {
    bool progress = false, all_done = true;
    for (int r = 0; r < n; ++r) {
      if (next[r] == programs[r].size()) continue;
      all_done = false;
      const algo::Transfer& t = programs[r][next[r]];
      const int level = static_cast<int>(t.level);
      if (!posted[r]) {
        if (t.send_peer >= 0) {
          const auto* p = buffers[r].data() + t.send.begin;
          channels[{level, r, group_rank_of(t.level, r, t.send_peer, m)}].emplace_back(
              p, p + t.send.count);
        }
        posted[r] = true;
        progress = true;
      }
      if (t.recv_peer >= 0) {
        auto& ch = channels[{level, group_rank_of(t.level, r, t.recv_peer, m), r}];
        if (ch.empty()) continue;
        const std::vector<double> msg = ch.front();
        ch.pop_front();
        EXPECT_EQ(static_cast<int64_t>(msg.size()), t.recv.count);
        for (int64_t e = 0; e < t.recv.count; ++e) {
          double& x = buffers[r][t.recv.begin + e];
          x = t.reduce ? x + msg[e] : msg[e];
        }
      }
      ++next[r];
      posted[r] = false;
      progress = true;
    }
    if (all_done) return true;
    if (!progress) return false;
  }
}

void expect_programs_sum(int n, int m, int64_t count, bool hierarchical) {
  std::vector<Program> programs;
  std::vector<std::vector<double>> buffers(n, std::vector<double>(count));
  for (int r = 0; r < n; ++r) {
    programs.push_back(hierarchical ? algo::hierarchical_all_reduce(count, m, r % m, n / m, r / m)
                                    : algo::ring_all_reduce(count, n, r));
    for (int64_t e = 0; e < count; ++e) buffers[r][e] = 1000.0 * (r + 1) + e;
  }
  ASSERT_TRUE(run_programs(programs, buffers, m)) << "deadlock n=" << n << " m=" << m;
  for (int r = 0; r < n; ++r) {
    for (int64_t e = 0; e < count; ++e) {
      ASSERT_EQ(buffers[r][e], 1000.0 * n * (n + 1) / 2 + n * e)
          << "n=" << n << " m=" << m << " count=" << count << " rank " << r << " element " << e;
    }
  }
}

TEST(Program, RingPartsCoverTheRegionInOrder) {
  const Span region{10, 1001};
  int64_t at = region.begin;
  for (int p = 0; p < 7; ++p) {
    const Span s = algo::ring_part(region, 7, p);
    EXPECT_EQ(s.begin, at);
    EXPECT_TRUE(s.count == 1001 / 7 || s.count == 1001 / 7 + 1) << s.count;
    at += s.count;
  }
  EXPECT_EQ(at, region.begin + region.count);
}

TEST(Program, RingAndHierarchicalSumExactlyOnEveryRank) {
  for (int n = 1; n <= 6; ++n) {
    for (int64_t count : {0, 1, 2, 7, 13, 1001}) {
      expect_programs_sum(n, n, count, false);
      for (int m = 1; m <= n; ++m) {
        if (n % m == 0) expect_programs_sum(n, m, count, true);
      }
    }
  }
}

TEST(Program, RingBytesPerRankAreTheClosedForm) {
  for (int n = 2; n <= 6; ++n) {
    for (int64_t count : {int64_t{1200}, int64_t{1001}}) {
      int64_t total = 0;
      for (int r = 0; r < n; ++r) {
        const algo::ProgramVolume v = algo::program_volume(algo::ring_all_reduce(count, n, r));
        const int64_t own = algo::ring_part({0, count}, n, r).count;
        const int64_t next = algo::ring_part({0, count}, n, (r + 1) % n).count;
        const int64_t prev = algo::ring_part({0, count}, n, (r + n - 1) % n).count;
        EXPECT_EQ(v.sent, 2 * count - own - next);
        EXPECT_EQ(v.received, 2 * count - prev - own);
        if (count % n == 0) {
          EXPECT_EQ(v.sent, 2 * (n - 1) * count / n);
        }
        total += v.sent;
      }
      EXPECT_EQ(total, 2 * (n - 1) * count);  // every part crosses n-1 links twice
    }
  }
}

TEST(Program, HierarchicalMovesTheRingTotalButLittleAcrossNodes) {
  // 8 ranks as 2 nodes of 4, count divisible by 8: 2 (n-1)/n N in all, of which 2 (k-1)/k N/m
  // between nodes, and 2 (k-1) + 2 (m-1) steps instead of the ring's 2 (n-1).
  const int64_t count = 8 * 1000;
  for (int r = 0; r < 8; ++r) {
    const Program p = algo::hierarchical_all_reduce(count, 4, r % 4, 2, r / 4);
    const algo::ProgramVolume v = algo::program_volume(p);
    EXPECT_EQ(v.sent, 2 * 7 * count / 8);
    EXPECT_EQ(v.sent_on[static_cast<int>(Level::cross)], 2 * 1 * count / 2 / 4);
    EXPECT_EQ(v.sent_on[static_cast<int>(Level::node)], 2 * 3 * count / 4);
    EXPECT_EQ(p.size(), 2u * 1 + 2u * 3);
  }
  EXPECT_EQ(algo::ring_all_reduce(count, 8, 0).size(), 2u * 7);
}

TEST(Program, AlgorithmNamesRoundTripAndBadOnesNameTheKey) {
  EXPECT_EQ(parse_algorithm("ring", "x"), AllReduceAlgorithm::ring);
  EXPECT_EQ(parse_algorithm("hierarchical", "x"), AllReduceAlgorithm::hierarchical);
  EXPECT_EQ(algorithm_name(AllReduceAlgorithm::mpi), "mpi");
  try {
    parse_algorithm("tree", "parallel.allreduce");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.allreduce = \"tree\""), std::string::npos)
        << e.what();
  }
}

TEST(Program, LocalGroupsRunTheAlgorithmsAsTheIdentity) {
  auto c = std::make_unique<AlgorithmCommunicator>(std::make_unique<LocalCommunicator>(),
                                                   AllReduceAlgorithm::hierarchical, 0);
  std::vector<float> a = {1, 2, 3}, b(3);
  c->all_reduce(Tensor(a.data(), DType::f32, {3}));
  c->reduce_scatter(Tensor(a.data(), DType::f32, {3}), Tensor(b.data(), DType::f32, {3}));
  EXPECT_EQ(a, (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(b, a);
  EXPECT_EQ(c->counters().total_sent(), 0u);
}

// --- under mpirun -------------------------------------------------------------------------

std::vector<float> random_values(int64_t count, int rank, uint64_t seed) {
  const Philox rng(seed, "algorithms_test");
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    v[i] = static_cast<float>(0.5 + rng.uniform(static_cast<uint64_t>(rank) * count + i));
  }
  return v;
}

Tensor view(std::vector<float>& v) {
  return Tensor(v.data(), DType::f32, {static_cast<int64_t>(v.size())});
}
Tensor view(std::vector<double>& v) {
  return Tensor(v.data(), DType::f64, {static_cast<int64_t>(v.size())});
}

// A fresh group of the whole world running `a`, nodes of `ranks_per_node` consecutive ranks.
std::unique_ptr<AlgorithmCommunicator> make_group(AllReduceAlgorithm a, int ranks_per_node) {
  Communicator& w = *mpi_world();
  return std::make_unique<AlgorithmCommunicator>(w.split(0, w.rank(), "algo"), a,
                                                 w.rank() / ranks_per_node);
}

// Every rank holds the same bytes in `v`.
bool same_on_all_ranks(std::vector<float>& v) {
  Communicator& w = *mpi_world();
  std::vector<float> all(v.size() * w.size());
  w.all_gather(view(v), view(all));
  for (int q = 0; q < w.size(); ++q) {
    if (std::memcmp(all.data() + q * v.size(), v.data(), v.size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

double sum_over_ranks(double x) {
  std::vector<double> v = {x};
  mpi_world()->all_reduce(view(v));
  return v[0];
}

TEST(MpiAlgorithms, MatchMpiAllreduceBitwiseReproducibleAndIdenticalOnAllRanks) {
  REQUIRE_MPI(2);
  const int n = mpi_world()->size(), r = mpi_world()->rank();
  for (int rpn = 1; rpn <= n; ++rpn) {
    if (n % rpn != 0) continue;
    for (auto a : {AllReduceAlgorithm::ring, AllReduceAlgorithm::hierarchical}) {
      if (a == AllReduceAlgorithm::ring && rpn != n) continue;  // nodes do not change the ring
      auto g = make_group(a, rpn);
      for (int64_t count : {1, 7, 1001, 65537}) {
        const std::vector<float> input = random_values(count, r, 7);
        std::vector<float> reference = input, first = input, second = input;
        mpi_world()->all_reduce(view(reference));  // MPI_Allreduce
        g->all_reduce(view(first));
        g->all_reduce(view(second));
        const std::string what =
            fmt::format("{} ranks_per_node={} count={}", algorithm_name(a), rpn, count);
        for (int64_t i = 0; i < count; ++i) {
          ASSERT_NEAR(first[i], reference[i], 1e-6 * std::fabs(reference[i])) << what << " " << i;
        }
        EXPECT_EQ(std::memcmp(first.data(), second.data(), count * sizeof(float)), 0) << what;
        EXPECT_TRUE(same_on_all_ranks(first)) << what;
      }
    }
  }
}

TEST(MpiAlgorithms, DoubleBf16AndMaxAreExact) {
  REQUIRE_MPI(2);
  const int n = mpi_world()->size(), r = mpi_world()->rank();
  for (auto a : {AllReduceAlgorithm::ring, AllReduceAlgorithm::hierarchical}) {
    auto g = make_group(a, n % 2 == 0 ? 2 : 1);
    std::vector<double> d(101), mx(33);
    std::vector<bf16> h(19);
    for (size_t i = 0; i < d.size(); ++i) d[i] = 1000.0 * r + i;
    for (size_t i = 0; i < mx.size(); ++i) mx[i] = r == static_cast<int>(i) % n ? 50.0 + i : -1.0;
    for (size_t i = 0; i < h.size(); ++i) h[i] = float_to_bf16(static_cast<float>(r + i));
    g->all_reduce(view(d));
    g->all_reduce(view(mx), ReduceOp::max);
    g->all_reduce(Tensor(h.data(), DType::bf16, {19}));
    for (size_t i = 0; i < d.size(); ++i) ASSERT_EQ(d[i], 1000.0 * n * (n - 1) / 2 + n * i);
    for (size_t i = 0; i < mx.size(); ++i) ASSERT_EQ(mx[i], 50.0 + i);
    for (size_t i = 0; i < h.size(); ++i) {
      ASSERT_EQ(bf16_to_float(h[i]), static_cast<float>(n * (n - 1) / 2 + n * i));
    }
  }
}

TEST(MpiAlgorithms, ReduceScatterAndAllGatherMatchMpi) {
  REQUIRE_MPI(2);
  const int n = mpi_world()->size(), r = mpi_world()->rank();
  auto g = make_group(AllReduceAlgorithm::ring, n);
  const int64_t chunk = 333;
  std::vector<float> in = random_values(chunk * n, r, 11), keep = in;
  std::vector<float> mine(chunk), ref(chunk);
  g->reduce_scatter(view(in), view(mine));
  mpi_world()->reduce_scatter(view(in), view(ref));
  EXPECT_EQ(in, keep) << "the input must stay untouched";
  for (int64_t i = 0; i < chunk; ++i) ASSERT_NEAR(mine[i], ref[i], 1e-6 * ref[i]) << i;
  std::vector<float> gathered(chunk * n), gathered_ref(chunk * n);
  g->all_gather(view(mine), view(gathered));
  mpi_world()->all_gather(view(mine), view(gathered_ref));
  EXPECT_EQ(gathered, gathered_ref);
}

TEST(MpiAlgorithms, CountersAreExactAndNothingIsCountedTwice) {
  REQUIRE_MPI(2);
  const int n = mpi_world()->size(), r = mpi_world()->rank();
  for (int rpn : {n, n % 2 == 0 ? 2 : 1}) {
    for (auto a : {AllReduceAlgorithm::ring, AllReduceAlgorithm::hierarchical}) {
      auto g = make_group(a, rpn);
      const uint64_t divisible = 120 * n;
      std::vector<float> x(divisible);
      g->all_reduce(view(x));
      const CommCounters& k = g->counters();
      const uint64_t expected = 2 * (n - 1) * divisible / n * 4;
      EXPECT_EQ(k.sent(Collective::all_reduce), expected);
      EXPECT_EQ(k.received(Collective::all_reduce), expected);
      EXPECT_EQ(k.count(Collective::all_reduce), 1u);
      // The algorithm's own messages are not in the group's send/recv counters.
      EXPECT_EQ(k.sent(Collective::send) + k.received(Collective::recv), 0u);
      const LinkTraffic& t = g->link_traffic();
      EXPECT_EQ(t.intra_node_sent + t.inter_node_sent, expected);
      EXPECT_EQ(t.intra_node_received + t.inter_node_received, expected);
      const uint64_t m = rpn, nodes = n / rpn;
      if (a == AllReduceAlgorithm::hierarchical) {
        EXPECT_EQ(t.inter_node_sent, 2 * (nodes - 1) * divisible / nodes / m * 4);
      }
      // An odd size: per rank the program's count, over all ranks exactly 2 (n-1) N.
      std::vector<float> y(1001);
      const CommCounters before = g->counters();
      g->all_reduce(view(y));
      const uint64_t sent = (g->counters() - before).sent(Collective::all_reduce);
      EXPECT_EQ(sent, 4u * algo::program_volume(g->all_reduce_program(1001)).sent);
      EXPECT_EQ(sum_over_ranks(static_cast<double>(sent)), 2.0 * (n - 1) * 1001 * 4);
      (void)r;
    }
  }
}

TEST(MpiAlgorithms, NonBlockingOperationsCompleteInAnyWaitOrder) {
  REQUIRE_MPI(2);
  const int n = mpi_world()->size(), r = mpi_world()->rank();
  auto g = make_group(AllReduceAlgorithm::hierarchical, n % 2 == 0 ? 2 : 1);
  std::vector<float> a(5000, 1.0f), b(777, static_cast<float>(r));
  std::vector<float> rs_in(64 * n, 2.0f), rs_out(64), ag_in(3, static_cast<float>(r)),
      ag_out(3 * n);
  Handle ha = g->start_all_reduce(view(a));
  Handle hrs = g->start_reduce_scatter(view(rs_in), view(rs_out));
  Handle hag = g->start_all_gather(view(ag_in), view(ag_out));
  Handle hb = g->start_all_reduce(view(b));
  hb->wait();  // the newest first: the older ones complete on the way
  while (!hag->test()) {
  }
  hrs->wait();
  ha->wait();
  for (float v : a) ASSERT_EQ(v, static_cast<float>(n));
  for (float v : b) ASSERT_EQ(v, n * (n - 1) / 2.0f);
  for (float v : rs_out) ASSERT_EQ(v, 2.0f * n);
  for (int q = 0; q < n; ++q) ASSERT_EQ(ag_out[3 * q], static_cast<float>(q));
  // A handle dropped unfinished completes its operation before its buffer can go away.
  std::vector<float> c(999, 1.0f);
  g->start_all_reduce(view(c)).reset();
  for (float v : c) ASSERT_EQ(v, static_cast<float>(n));
}

TEST(MpiAlgorithms, HierarchicalRejectsUnequalNodesOnEveryRank) {
  REQUIRE_MPI(3);
  Communicator& w = *mpi_world();
  try {
    AlgorithmCommunicator g(w.split(0, w.rank(), "uneven"), AllReduceAlgorithm::hierarchical,
                            w.rank() == 0 ? 0 : 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("same number of members on every node"), std::string::npos)
        << e.what();
  }
}

// --- the link emulator --------------------------------------------------------------------

TEST(MpiAlgorithms, EmulatedLinkDelaysAndQueuesMessagesBetweenSites) {
  REQUIRE_MPI(2);
  Communicator& w = *mpi_world();
  const int r = w.rank();
  const LinkModel slow{.latency_s = 0.02, .bytes_per_second = 1e6};  // 4,000 bytes: 4 ms
  for (const bool host_clock : {true, false}) {
    LinkEmulator e(w.split(0, r, "emulated"), r == 0 ? 0 : 1, slow, {}, -1, nullptr, host_clock);
    EXPECT_EQ(e.stamps_messages(), host_clock);
    EXPECT_EQ(e.site_of(0), 0);
    EXPECT_EQ(e.site_of(1), 1);
    std::vector<float> m1(1000, 3.0f), m2(1000, 4.0f);
    // The ranks share this host's monotonic clock (as the emulator does): the sender's start time
    // goes to the receiver over the plain world communicator.
    std::vector<double> t0 = {0};
    if (r == 0) {
      t0[0] = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
                  .count();
      w.send(view(t0), 1, 99);
      Handle h1 = e.start_send(view(m1), 1, 1);
      Handle h2 = e.start_send(view(m2), 1, 2);
      h1->wait();  // a send ends when the link has carried it: 4 ms, then 8 ms for the next
      h2->wait();  // (held at the sender: when it is delivered, 20 ms later)
      const double sent =
          std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
              .count() -
          t0[0];
      EXPECT_GE(sent, 0.008);
      EXPECT_EQ(e.bytes_sent_between_sites(), 8000u);
    } else if (r == 1) {
      w.recv(view(t0), 0, 99);
      const auto since_start = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
                   .count() -
               t0[0];
      };
      std::vector<float> in1(1000), in2(1000);
      e.recv(view(in1), 0, 1);
      EXPECT_GE(since_start(), 0.02 + 0.004);  // latency + transfer
      e.recv(view(in2), 0, 2);
      EXPECT_GE(since_start(), 0.02 + 0.008);  // queued behind the first on the same link
      EXPECT_EQ(in1, m1);
      EXPECT_EQ(in2, m2);
      EXPECT_EQ(e.bytes_sent_between_sites(), 0u);
    }
    e.barrier();
  }
}

TEST(MpiAlgorithms, RingOverEmulatedSitesMatchesMpiAndCountsWhatCrosses) {
  REQUIRE_MPI(2);
  Communicator& w = *mpi_world();
  const int n = w.size(), r = w.rank();
  const auto site = [n](int q) { return q < n / 2 ? 0 : 1; };
  const LinkModel slow{.latency_s = 0.002, .bytes_per_second = 1e9};
  auto emulated = std::make_unique<LinkEmulator>(w.split(0, r, "sites"), site(r), slow);
  AlgorithmCommunicator g(std::move(emulated), AllReduceAlgorithm::ring, site(r));
  const int64_t count = 10007;
  std::vector<float> x = random_values(count, r, 3), ref = x;
  w.all_reduce(view(ref));
  g.all_reduce(view(x));
  for (int64_t i = 0; i < count; ++i) ASSERT_NEAR(x[i], ref[i], 1e-6 * ref[i]) << i;
  // The ring's sends to a neighbour on the other site: those are the slow link's bytes.
  uint64_t crossing = 0;
  for (const algo::Transfer& t : g.all_reduce_program(count)) {
    if (t.send_peer >= 0 && site(t.send_peer) != site(r)) crossing += 4 * t.send.count;
  }
  EXPECT_EQ(g.link_traffic().inter_node_sent, crossing);
  auto& e = static_cast<LinkEmulator&>(g.transport());
  EXPECT_EQ(e.bytes_sent_between_sites(), 0u) << "the ring runs on its own sub-communicator";
}

TEST(MpiAlgorithms, MeshGroupsRunTheChosenAlgorithmUnknownToTheirUsers) {
  REQUIRE_MPI(2);
  Communicator& w = *mpi_world();
  const int n = w.size();
  MeshOptions o;
  o.all_reduce = AllReduceAlgorithm::hierarchical;
  o.ranks_per_node = n % 2 == 0 ? 2 : 1;
  o.sites = n % 2 == 0 ? 2 : 1;
  o.between_sites = {.latency_s = 0.001, .bytes_per_second = 1e9};
  DeviceMesh mesh(w, {.dp = n}, {}, o);
  Communicator& dp = mesh.group(MeshGroup::dp);
  std::vector<float> g(4 * n, 1.0f);
  const CommCounters before = mesh.total_counters();
  dp.all_reduce(view(g));
  for (float v : g) ASSERT_EQ(v, static_cast<float>(n));
  auto* a = dynamic_cast<AlgorithmCommunicator*>(&dp);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->ranks_per_node(), o.ranks_per_node);
  // Counted once, by the group: not again by the transports under it.
  EXPECT_EQ((mesh.total_counters() - before).total_sent(), 2u * (n - 1) * 4 * 4);
  EXPECT_EQ(DeviceMesh::node_of(o, n, n - 1), (n - 1) / o.ranks_per_node);
  o.ranks_per_node = n + 1;
  EXPECT_THROW(DeviceMesh(w, {.dp = n}, {}, o), Error);
}

TEST(BenchAllReduce, RunsUnderLaunchAndMovesTheModelsBytes) {
  // Correctness only (the command checks each result); its times are the benchmark's business.
  const auto r = trillion::testing::run_trillion(
      "launch -n 2 -- bench allreduce --mb 0.1 --sites 2 --latency-ms 1 --reps 1 --json", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j["results"].size(), 2u);  // ring, hierarchical (mpi is not measurable emulated)
  for (const auto& x : j["results"]) {
    EXPECT_EQ(x["bytes_per_rank"].get<double>(), x["model_bytes_per_rank"].get<double>());
    EXPECT_EQ(x["bytes_per_rank"].get<double>(), 100000.0);     // 2 (n-1)/n of 0.1 MB
    EXPECT_GE(x["measured_seconds"].get<double>(), 2 * 0.001);  // two latencies at least
  }
  const auto alone = trillion::testing::run_trillion("bench allreduce", true);
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_NE(alone.output.find("trillion launch -n 4 -- bench allreduce"), std::string::npos)
      << alone.output;
}

}  // namespace
}  // namespace trillion::comm
