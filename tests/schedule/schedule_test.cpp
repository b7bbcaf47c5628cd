// Pipeline schedules: the simulator with unit costs reproduces the published bubble formulas
// (Narayanan et al. 2104.04473; Qi et al. 2401.10241 Table 2; DeepSeek-V3 2412.19437 Table 2)
// and peak in-flight activations, every generated schedule validates, and the validator catches
// broken ones.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "schedule/generators.h"
#include "schedule/simulator.h"

namespace trillion::schedule {
namespace {

double bubble(ScheduleKind kind, int p, int m, int v = 1, OpCosts c = {}) {
  return simulate(generate_schedule(kind, p, m, v, c), c).bubble_fraction;
}

TEST(Action, TextFormRoundTrips) {
  const Action a = parse_action("2F0", 1);
  EXPECT_EQ(a.stage, 2);
  EXPECT_EQ(a.kind, ActionKind::kForward);
  EXPECT_EQ(a.microbatch, 0);
  EXPECT_EQ(a.rank, 1);
  EXPECT_EQ(to_string(parse_action("13SEND_B7", 0)), "13SEND_B7");
  EXPECT_EQ(parse_action("3RECV_F12", 0).kind, ActionKind::kRecvF);
  EXPECT_EQ(parse_action("0W5", 0).kind, ActionKind::kBackwardWeight);
  EXPECT_THROW(parse_action("F2", 0), Error);
  EXPECT_THROW(parse_action("2X1", 0), Error);
  EXPECT_THROW(parse_action("2F", 0), Error);
  EXPECT_EQ(parse_schedule_kind("zb-h1"), ScheduleKind::kZbH1);
  EXPECT_THROW(parse_schedule_kind("zigzag"), Error);
}

// Per-chunk costs (a measured run's replay): equal costs give the uniform simulation exactly, and
// one micro-batch through two unequal stages takes the sum of its path: F0 + F1 + B1 + B0 + W0
// plus a transfer each way.
TEST(Simulator, PerChunkCostsReplayUnequalStages) {
  for (ScheduleKind k : {ScheduleKind::k1F1B, ScheduleKind::kZbH1, ScheduleKind::kInterleaved,
                         ScheduleKind::kDualPipe}) {
    const int v = k == ScheduleKind::kInterleaved || k == ScheduleKind::kDualPipe ? 2 : 1;
    const OpCosts c{1.0, 2.0, 1.5, 0.25};
    const Schedule s = generate_schedule(k, 4, 8, v, c);
    const OpCosts chunk{c.forward * s.chunk_fraction, c.backward_input * s.chunk_fraction,
                        c.backward_weight * s.chunk_fraction, 0.0};
    const Simulation uniform = simulate(s, c, false);
    const Simulation replay = simulate(s, ChunkCosts(4, std::vector<OpCosts>(v, chunk)), c.comm,
                                       false);
    EXPECT_DOUBLE_EQ(replay.makespan, uniform.makespan) << schedule_kind_name(k);
    EXPECT_DOUBLE_EQ(replay.bubble_fraction, uniform.bubble_fraction) << schedule_kind_name(k);
  }
  const Schedule one = generate_schedule(ScheduleKind::kGPipe, 2, 1, 1, {});
  const ChunkCosts costs{{OpCosts{1.0, 1.0, 0.5, 0.0}}, {OpCosts{2.0, 2.0, 0.0, 0.0}}};
  EXPECT_DOUBLE_EQ(simulate(one, costs, 0.0).makespan, 1.0 + 2.0 + 2.0 + 1.0 + 0.5);
  EXPECT_DOUBLE_EQ(simulate(one, costs, 0.5).makespan, 1.0 + 0.5 + 2.0 + 2.0 + 0.5 + 1.0 + 0.5);
  EXPECT_THROW(simulate(one, ChunkCosts(3, std::vector<OpCosts>(1)), 0.0), Error);
}

// GPipe and 1F1B: (p-1)/(m+p-1) of the total time, whatever the split of F, B and W.
TEST(Bubble, GPipeAnd1F1BMatchNarayanan) {
  for (int p : {1, 2, 4, 8, 16})
    for (int m : {1, 2, 4, 8, 16, 32}) {
      const double expected = (p - 1.0) / (m + p - 1.0);
      EXPECT_NEAR(bubble(ScheduleKind::kGPipe, p, m), expected, 1e-12) << p << " " << m;
      EXPECT_NEAR(bubble(ScheduleKind::k1F1B, p, m), expected, 1e-12) << p << " " << m;
      EXPECT_NEAR(bubble(ScheduleKind::k1F1B, p, m, 1, {1.0, 2.0, 0.5, 0.0}), expected, 1e-12);
    }
}

// Interleaved 1F1B: the bubble shrinks to (p-1)/v of a micro-batch's time, i.e. a fraction
// (p-1)/(v m + p - 1) of the total.
TEST(Bubble, InterleavedMatchesNarayanan) {
  for (int p : {2, 4, 8})
    for (int v : {2, 3, 4})
      for (int k : {1, 2, 4}) {
        const int m = k * p;
        EXPECT_NEAR(bubble(ScheduleKind::kInterleaved, p, m, v), (p - 1.0) / (v * m + p - 1.0),
                    1e-12)
            << "p=" << p << " v=" << v << " m=" << m;
      }
}

// ZB-H1 idles (p-1)(T_F + T_B - T_W) per rank (Qi et al. Table 2) when T_W <= T_F, T_B.
TEST(Bubble, ZeroBubbleH1MatchesQi) {
  for (OpCosts c : {OpCosts{1, 1, 1, 0}, OpCosts{2, 2, 1, 0}, OpCosts{1, 1.5, 0.5, 0}})
    for (int p : {2, 4, 8})
      for (int m : {p, 2 * p, 4 * p, 3 * p + 1}) {
        const double work = m * (c.forward + c.backward_input + c.backward_weight);
        const double idle = (p - 1) * (c.forward + c.backward_input - c.backward_weight);
        EXPECT_NEAR(bubble(ScheduleKind::kZbH1, p, m, 1, c), idle / (work + idle), 1e-12)
            << "p=" << p << " m=" << m << " F,B,W=" << c.forward << "," << c.backward_input << ","
            << c.backward_weight;
      }
}

// ZB-H2 idles (p-1)(T_F + T_B - 2 T_W) per rank (Qi et al. Table 2) with 2p-1 micro-batches in
// flight. One step simulated alone cannot beat the (p-1) T_F ramp-up of its last rank (the paper
// removes it by bypassing the optimizer synchronisation between steps), so the simulated idle is
// (p-1) max(T_F + T_B - 2 T_W, T_F).
TEST(Bubble, ZeroBubbleH2MatchesQiAboveTheOneStepFloor) {
  for (OpCosts c : {OpCosts{1, 1, 1, 0}, OpCosts{1, 1, 0.5, 0}, OpCosts{1, 1.5, 0.5, 0},
                    OpCosts{2, 2, 1, 0}, OpCosts{1, 2, 0.5, 0}})
    for (int p : {2, 4, 8})
      for (int m : {2 * p, 4 * p, 3 * p + 1}) {
        const double f = c.forward, b = c.backward_input, w = c.backward_weight;
        const double idle = (p - 1) * std::max(f + b - 2 * w, f);
        const double work = m * (f + b + w);
        EXPECT_NEAR(bubble(ScheduleKind::kZbH2, p, m, 1, c), idle / (work + idle), 1e-12)
            << "p=" << p << " m=" << m << " F,B,W=" << f << "," << b << "," << w;
        EXPECT_LE(bubble(ScheduleKind::kZbH2, p, m, 1, c), bubble(ScheduleKind::kZbH1, p, m, 1, c));
      }
}

// DualPipe idles (p/2 - 1)(F&B + B - 3W) per rank (DeepSeek-V3 Table 2, B = full backward);
// the simulator runs an overlapped F&B pair back to back, so F&B = F + B here. The published
// formula assumes forward and input-backward chunks of equal time (T_F = T_B), as here.
TEST(Bubble, DualPipeMatchesDeepSeek) {
  for (OpCosts c : {OpCosts{1, 1, 1, 0}, OpCosts{1, 1, 0.5, 0}, OpCosts{2, 2, 1, 0}})
    for (int p : {2, 4, 8, 16})
      for (int m : {2 * p, 4 * p, 2 * p + 6}) {
        const double f = c.forward, b_full = c.backward_input + c.backward_weight,
                     w = c.backward_weight;
        const double idle = (p / 2 - 1) * ((f + b_full) + b_full - 3 * w);
        const double work = m * (f + b_full);
        EXPECT_NEAR(bubble(ScheduleKind::kDualPipe, p, m, 2, c), idle / (work + idle), 1e-12)
            << "p=" << p << " m=" << m << " F,B,W=" << f << "," << c.backward_input << "," << w;
      }
}

// Peak activations held by each rank, in micro-batches of one full stage.
TEST(Inflight, MatchesPaperMemoryColumns) {
  for (int p : {2, 4, 8}) {
    const int m = 4 * p;
    auto peak = [&](ScheduleKind k, int v = 1) {
      return simulate(generate_schedule(k, p, m, v), {}).peak_inflight;
    };
    const auto gpipe = peak(ScheduleKind::kGPipe), f1b1 = peak(ScheduleKind::k1F1B),
               zb1 = peak(ScheduleKind::kZbH1), zb2 = peak(ScheduleKind::kZbH2),
               dual = peak(ScheduleKind::kDualPipe, 2);
    for (int r = 0; r < p; ++r) {
      EXPECT_DOUBLE_EQ(gpipe[r], m);
      EXPECT_DOUBLE_EQ(f1b1[r], p - r);  // first stage holds p (Megatron)
      EXPECT_LE(zb1[r], p);              // ZB-H1: p M_B, same as 1F1B
      EXPECT_LE(zb2[r], 2 * p - 1);      // ZB-H2: (2p-1) M_B
      EXPECT_LE(dual[r], p + 1);         // DualPipe: p+1 (of a full stage each)
    }
    EXPECT_DOUBLE_EQ(zb1[0], p);
    EXPECT_DOUBLE_EQ(zb2[0], 2 * p - 1);
    EXPECT_DOUBLE_EQ(*std::max_element(dual.begin(), dual.end()), p + 1);
    for (int v : {2, 4}) {  // interleaved: first stage holds p (1 + (p-1)/(p v))
      EXPECT_NEAR(peak(ScheduleKind::kInterleaved, v)[0], p * (1 + (p - 1.0) / (p * v)), 1e-12);
    }
  }
}

TEST(Validate, EveryGeneratedScheduleIsValid) {
  const ScheduleKind kinds[] = {ScheduleKind::kGPipe,       ScheduleKind::k1F1B,
                                ScheduleKind::kInterleaved, ScheduleKind::kZbH1,
                                ScheduleKind::kZbH2,        ScheduleKind::kDualPipe};
  for (ScheduleKind k : kinds)
    for (int p : {1, 2, 3, 4, 6, 8})
      for (int m : {1, 2, 4, 8, 12, 16, 24}) {
        int v = k == ScheduleKind::kInterleaved ? 2 : k == ScheduleKind::kDualPipe ? 2 : 1;
        if (k == ScheduleKind::kInterleaved && m % p != 0) continue;
        if (k == ScheduleKind::kDualPipe && (p % 2 || m % 2 || m < 2 * p)) continue;
        const Schedule s = generate_schedule(k, p, m, v);
        const auto problems = validate(s);
        EXPECT_TRUE(problems.empty()) << schedule_kind_name(k) << " p=" << p << " m=" << m << ": "
                                      << (problems.empty() ? "" : problems[0]);
        size_t computes = 0;
        for (const auto& list : s.actions)
          for (const Action& a : list) computes += is_compute(a.kind);
        EXPECT_EQ(computes,
                  static_cast<size_t>(3 * m * (k == ScheduleKind::kDualPipe ? 1 : v) * p));
      }
}

TEST(Validate, RejectsShapesTheGeneratorsCannotBuild) {
  EXPECT_THROW(generate_schedule(ScheduleKind::kInterleaved, 4, 6, 2), Error);
  EXPECT_THROW(generate_schedule(ScheduleKind::kInterleaved, 4, 8, 1), Error);
  EXPECT_THROW(generate_schedule(ScheduleKind::kDualPipe, 3, 12, 2), Error);
  EXPECT_THROW(generate_schedule(ScheduleKind::kDualPipe, 4, 6, 2), Error);
  EXPECT_THROW(generate_schedule(ScheduleKind::k1F1B, 0, 4), Error);
  EXPECT_THROW(generate_schedule(ScheduleKind::k1F1B, 4, 4, 2), Error);
}

Schedule hand_made(const std::vector<std::vector<std::string>>& lists) {
  Schedule s = generate_schedule(ScheduleKind::k1F1B, 2, 2);
  for (int r = 0; r < 2; ++r) {
    s.actions[r].clear();
    for (const auto& t : lists[r]) s.actions[r].push_back(parse_action(t, r));
  }
  return s;
}

TEST(Validate, CatchesMissingRecvWrongOrderAndDeadlock) {
  const std::vector<std::string> rank1 = {"1RECV_F0", "1F0", "1B0", "1SEND_B0", "1W0",
                                          "1RECV_F1", "1F1", "1B1", "1SEND_B1", "1W1"};
  const std::vector<std::string> rank0 = {"0F0", "0SEND_F0", "0F1",      "0SEND_F1", "0RECV_B0",
                                          "0B0", "0W0",      "0RECV_B1", "0B1",      "0W1"};
  EXPECT_TRUE(validate(hand_made({rank0, rank1})).empty());
  auto no_recv = rank1;
  no_recv.erase(no_recv.begin());
  EXPECT_FALSE(validate(hand_made({rank0, no_recv})).empty());
  auto w_first = rank0;
  std::swap(w_first[5], w_first[6]);  // 0W0 before 0B0
  EXPECT_FALSE(validate(hand_made({w_first, rank1})).empty());
  // Rank 0 waits for mb 0's gradient before sending mb 1; rank 1 wants mb 1 before it
  // computes mb 0's backward: a cycle.
  const std::vector<std::string> wait0 = {"0F0", "0SEND_F0", "0RECV_B0", "0B0", "0W0",
                                          "0F1", "0SEND_F1", "0RECV_B1", "0B1", "0W1"};
  const std::vector<std::string> greedy1 = {"1RECV_F0", "1F0", "1RECV_F1", "1F1",      "1B0",
                                            "1SEND_B0", "1W0", "1B1",      "1SEND_B1", "1W1"};
  const auto problems = validate(hand_made({wait0, greedy1}));
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("deadlock"), std::string::npos);
  EXPECT_THROW(simulate(hand_made({wait0, greedy1}), {}), Error);
}

// Latency between ranks adds to the critical path: GPipe with latency c waits 2(p-1)c more.
TEST(Simulate, CommunicationLatencyLengthensTheCriticalPath) {
  const int p = 4, m = 8;
  const Schedule s = generate_schedule(ScheduleKind::kGPipe, p, m);
  const double base = simulate(s, {1, 1, 1, 0}).makespan;
  EXPECT_DOUBLE_EQ(base, (m + p - 1) * 3.0);
  EXPECT_DOUBLE_EQ(simulate(s, {1, 1, 1, 0.25}).makespan, base + 2 * (p - 1) * 0.25);
}

}  // namespace
}  // namespace trillion::schedule
