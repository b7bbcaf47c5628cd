// Collectives under mpirun (CTest runs this binary with 2, 3 and 4 ranks): every collective,
// blocking and non-blocking, in every element type, gives exactly the values a hand computation
// gives, and the counters hold exactly the ring-algorithm byte volumes of communicator.h.
// Values are small integers, so f32/bf16 sums are exact and comparisons can be ==.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "comm/communicator.h"
#include "core/error.h"
#include "mpi_env.h"

namespace trillion::comm {
namespace {

const auto* const kMpiEnv = ::testing::AddGlobalTestEnvironment(new testing::MpiEnvironment);

using testing::mpi_world;

Tensor view(std::vector<float>& v) {
  return Tensor(v.data(), DType::f32, {(int64_t)v.size()});
}
Tensor view(std::vector<double>& v) {
  return Tensor(v.data(), DType::f64, {(int64_t)v.size()});
}

TEST(Mpi, AllReduceSumAndMaxExact) {
  REQUIRE_MPI(2);
  Communicator& c = *mpi_world();
  const int n = c.size(), r = c.rank();
  std::vector<float> f(1000);
  std::vector<double> d(17);
  for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>((r + 1) * (i % 7 + 1));
  for (size_t i = 0; i < d.size(); ++i) d[i] = r == 1 ? 100.0 + i : -static_cast<double>(i);
  c.all_reduce(view(f));
  c.all_reduce(view(d), ReduceOp::max);
  const float ranks_sum = n * (n + 1) / 2.0f;
  for (size_t i = 0; i < f.size(); ++i) ASSERT_EQ(f[i], ranks_sum * (i % 7 + 1)) << i;
  for (size_t i = 0; i < d.size(); ++i) ASSERT_EQ(d[i], 100.0 + i) << i;
}

TEST(Mpi, AllReduceBf16UsesOwnOp) {
  REQUIRE_MPI(2);
  Communicator& c = *mpi_world();
  std::vector<bf16> v(64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float_to_bf16(static_cast<float>(c.rank() + i));
  c.all_reduce(Tensor(v.data(), DType::bf16, {64}));
  const int n = c.size();
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_EQ(bf16_to_float(v[i]), static_cast<float>(n * (n - 1) / 2 + n * i)) << i;
  }
}

TEST(Mpi, ReduceScatterGivesEachRankItsChunk) {
  REQUIRE_MPI(2);
  Communicator& c = *mpi_world();
  const int n = c.size(), r = c.rank();
  const int chunk = 5;
  std::vector<double> in(chunk * n), out(chunk);
  for (int i = 0; i < chunk * n; ++i) in[i] = 1000.0 * r + i;
  c.reduce_scatter(view(in), view(out));
  for (int k = 0; k < chunk; ++k) {
    // sum over ranks q of 1000 q + (r*chunk + k)
    ASSERT_EQ(out[k], 1000.0 * n * (n - 1) / 2 + n * (r * chunk + k)) << k;
  }
}

TEST(Mpi, AllGatherConcatenatesInRankOrder) {
  REQUIRE_MPI(2);
  Communicator& c = *mpi_world();
  const int n = c.size(), r = c.rank();
  std::vector<float> in(3), out(3 * n, -1.0f);
  for (int i = 0; i < 3; ++i) in[i] = static_cast<float>(10 * r + i);
  c.all_gather(view(in), view(out));
  for (int q = 0; q < n; ++q) {
    for (int i = 0; i < 3; ++i) ASSERT_EQ(out[q * 3 + i], 10.0f * q + i);
  }
}

TEST(Mpi, BroadcastFromLastRank) {
  REQUIRE_MPI(2);
  Communicator& c = *mpi_world();
  const int root = c.size() - 1;
  std::vector<double> v(9, c.rank() == root ? 0.0 : -7.0);
  if (c.rank() == root) std::iota(v.begin(), v.end(), 42.0);
  c.broadcast(view(v), root);
  for (int i = 0; i < 9; ++i) ASSERT_EQ(v[i], 42.0 + i);
}

TEST(Mpi, AllToAllWithPerRankCounts) {
  REQUIRE_MPI(2);
  Communicator& c = *mpi_world();
  const int n = c.size(), r = c.rank();
  // Rank r sends (r + p + 1) elements to rank p, each encoding (source, destination, index).
  std::vector<int64_t> send_counts(n), recv_counts(n);
  std::vector<double> in, out;
  for (int p = 0; p < n; ++p) {
    send_counts[p] = r + p + 1;
    recv_counts[p] = p + r + 1;
    for (int k = 0; k < r + p + 1; ++k) in.push_back(10000.0 * r + 100.0 * p + k);
  }
  out.assign(std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0}), -1.0);
  c.all_to_all(view(in), send_counts, view(out), recv_counts);
  size_t pos = 0;
  for (int p = 0; p < n; ++p) {
    for (int k = 0; k < p + r + 1; ++k) ASSERT_EQ(out[pos++], 10000.0 * p + 100.0 * r + k);
  }
  ASSERT_EQ(pos, out.size());
}

TEST(Mpi, SendRecvAroundARing) {
  REQUIRE_MPI(2);
  Communicator& c = *mpi_world();
  const int n = c.size(), r = c.rank();
  std::vector<float> out(4, static_cast<float>(r)), in(4, -1.0f);
  Handle recv = c.start_recv(view(in), (r + n - 1) % n, 7);
  Handle send = c.start_send(view(out), (r + 1) % n, 7);
  send->wait();
  recv->wait();
  for (float v : in) ASSERT_EQ(v, static_cast<float>((r + n - 1) % n));
  c.barrier();
}

TEST(Mpi, NonBlockingCollectivesCompleteTogether) {
  REQUIRE_MPI(2);
  Communicator& c = *mpi_world();
  const int n = c.size(), r = c.rank();
  std::vector<float> a(256, 1.0f), rs_in(4 * n, static_cast<float>(r)), rs_out(4);
  std::vector<float> ag_in(2, static_cast<float>(r)), ag_out(2 * n);
  std::vector<float> bc(8, r == 0 ? 5.0f : 0.0f);
  std::vector<Handle> handles;
  handles.push_back(c.start_all_reduce(view(a)));
  handles.push_back(c.start_reduce_scatter(view(rs_in), view(rs_out)));
  handles.push_back(c.start_all_gather(view(ag_in), view(ag_out)));
  handles.push_back(c.start_broadcast(view(bc), 0));
  // test() drives progress without blocking; it must eventually report completion.
  while (!handles[0]->test()) {
  }
  wait_all(handles);
  EXPECT_TRUE(handles.empty());
  for (float v : a) ASSERT_EQ(v, static_cast<float>(n));
  for (float v : rs_out) ASSERT_EQ(v, n * (n - 1) / 2.0f);
  for (int q = 0; q < n; ++q) ASSERT_EQ(ag_out[2 * q], static_cast<float>(q));
  for (float v : bc) ASSERT_EQ(v, 5.0f);
}

TEST(Mpi, CountersHoldExactRingVolumes) {
  REQUIRE_MPI(2);
  const CommCounters world_before = mpi_world()->counters();
  auto sub = mpi_world()->split(0, mpi_world()->rank(), "counted");  // fresh counters
  Communicator& c = *sub;
  const uint64_t n = c.size(), r = c.rank();
  const uint64_t N = 1200 * n;  // elements, divisible by n
  std::vector<float> big(N), chunk(N / n);
  std::vector<double> dbl(10);
  c.all_reduce(view(big));                             // 2 (n-1) N/n * 4 bytes
  c.reduce_scatter(view(big), view(chunk));            // (n-1) N/n * 4
  c.all_gather(view(chunk), view(big));                // (n-1) N/n * 4
  c.start_all_gather(view(chunk), view(big))->wait();  // the same again, non-blocking
  c.broadcast(view(dbl), 1);  // rank 1 sends 80 bytes, the others receive 80
  std::vector<int64_t> counts(n, 2);
  std::vector<double> a2a_in(2 * n), a2a_out(2 * n);
  c.all_to_all(view(a2a_in), counts, view(a2a_out), counts);  // 2 (n-1) * 8 each way
  c.barrier();
  const CommCounters& k = c.counters();
  const uint64_t share = (n - 1) * (N / n) * 4;
  EXPECT_EQ(k.sent(Collective::all_reduce), 2 * share);
  EXPECT_EQ(k.received(Collective::all_reduce), 2 * share);
  EXPECT_EQ(k.sent(Collective::reduce_scatter), share);
  EXPECT_EQ(k.sent(Collective::all_gather), 2 * share);
  EXPECT_EQ(k.count(Collective::all_gather), 2u);
  EXPECT_EQ(k.sent(Collective::broadcast), r == 1 ? 80u : 0u);
  EXPECT_EQ(k.received(Collective::broadcast), r == 1 ? 0u : 80u);
  EXPECT_EQ(k.sent(Collective::all_to_all), 2 * (n - 1) * 8);
  EXPECT_EQ(k.received(Collective::all_to_all), 2 * (n - 1) * 8);
  EXPECT_EQ(k.count(Collective::barrier), 1u);
  EXPECT_EQ(k.total_sent(), 5 * share + (r == 1 ? 80u : 0u) + 2 * (n - 1) * 8);
  // The parent's counters did not see the sub-group's traffic.
  EXPECT_EQ((mpi_world()->counters() - world_before).total_sent(), 0u);
}

TEST(Mpi, FailedCallNamesCallFileAndValues) {
  REQUIRE_MPI(2);
  Communicator& c = *mpi_world();
  std::vector<float> v(3);
  try {
    c.send(view(v), (c.rank() + 1) % c.size(), -5);  // negative tags are invalid in MPI
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("MPI_Isend"), std::string::npos) << m;
    EXPECT_NE(m.find("mpi_communicator.cpp"), std::string::npos) << m;
    EXPECT_NE(m.find("tag -5"), std::string::npos) << m;
  }
}

TEST(Mpi, ArgumentErrorsNameGroupAndSizes) {
  REQUIRE_MPI(2);
  Communicator& c = *mpi_world();
  std::vector<float> in(5), out(2);
  try {
    c.reduce_scatter(view(in), view(out));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("group 'world'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(c.send(view(in), c.rank()), Error);  // to itself
}

TEST(Local, GroupOfOneIsTheIdentityAndCountsNothing) {
  LocalCommunicator c;
  std::vector<float> a = {1, 2, 3}, b(3);
  c.all_reduce(view(a));
  c.reduce_scatter(view(a), view(b));
  EXPECT_EQ(b, a);
  std::vector<float> g(3);
  c.all_gather(view(a), view(g));
  EXPECT_EQ(g, a);
  c.broadcast(view(a), 0);
  c.all_to_all(view(a), {3}, view(b), {3});
  EXPECT_EQ(b, a);
  EXPECT_EQ(c.counters().total_sent(), 0u);
  EXPECT_EQ(c.counters().count(Collective::all_reduce), 1u);
  EXPECT_THROW(c.send(view(a), 0), Error);
  EXPECT_EQ(c.split(0, 0, "dp")->size(), 1);
}

}  // namespace
}  // namespace trillion::comm
