// Ring attention (parallel/context.h) against one-process tiled attention on the whole sequence,
// in f64. One process: the block kernel over arbitrary spans, merged, equals the whole-sequence
// kernel (values and gradients). Under mpirun (CTest's parallel_mpi_2 / _4: cp = the world size):
// for zigzag and contiguous splits, GQA (4 query heads over 2 kv heads), tiles of 4 that do not
// divide the chunks, every rank's out, lse and dQKV rows equal the reference rows at their global
// positions to 1e-11; the cp group's counters hold exactly plan/context_ring.h's bytes; zigzag's
// visible (query, key) pairs are equal on every rank in forward and in backward, contiguous's
// are not (max/mean printed); the skipped span pairs are exactly the masked chunk pairs. MLA's
// core (value head dim VD != query/key head dim HD, K/V per query head): the block kernel over
// spans and the zigzag ring equal the whole sequence, and the ring's bytes and buffers are
// plan/'s MLA formulas (K | V rows of KV (HD + VD)).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "../comm/mpi_env.h"
#include "core/philox.h"
#include "parallel/context.h"
#include "plan/context_ring.h"

namespace trillion {
namespace {

constexpr int64_t kB = 2, kT = 40, kNH = 4, kKV = 2, kHD = 8;
constexpr AttentionBlocks kTiles{4, 4};

// GQA with VD = HD by default; MLA's core: KV = NH, VD = 12 != HD = 8.
AttentionShape shape_of(int64_t T, int64_t KV = kKV, int64_t VD = 0) {
  return {kB, T, kNH, KV, kHD, VD};
}
AttentionShape mla_shape_of(int64_t T) {
  return shape_of(T, kNH, 12);
}

std::vector<double> random_values(int64_t n, uint64_t seed) {
  Philox rng(seed, "context-test");
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = rng.normal(i);
  return v;
}

Tensor t2(std::vector<double>& v, int64_t rows) {
  return Tensor(v.data(), DType::f64, {rows, static_cast<int64_t>(v.size()) / rows});
}

// The whole-sequence reference: out, lse and dqkv of the one-process tiled kernels.
struct Reference {
  std::vector<double> qkv, dout, out, lse, dqkv;
};

Reference reference(Backend& be, const AttentionShape& s) {
  const int64_t N = kB * kT;
  Reference r;
  r.qkv = random_values(N * s.qkv_width(), 1);
  r.dout = random_values(N * s.out_width(), 2);
  r.out.assign(N * s.out_width(), 0);
  r.lse.assign(kB * kNH * kT, 0);
  r.dqkv.assign(r.qkv.size(), 0);
  be.flash_attention_forward(t2(r.out, N), t2(r.lse, kB * kNH), t2(r.qkv, N), s, kTiles);
  be.flash_attention_backward(t2(r.dqkv, N), t2(r.dout, N), t2(r.out, N), t2(r.qkv, N),
                              t2(r.lse, kB * kNH), s, kTiles);
  return r;
}

void expect_close(double got, double want, double tol, const char* what, int64_t i) {
  ASSERT_NEAR(got, want, tol * (1 + std::abs(want))) << what << " element " << i;
}

void check_block_kernel_over_spans(const AttentionShape& s) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const Reference r = reference(*be, s);
  // The sequence as three uneven spans stored out of order: rows [0,7) hold positions 25..31,
  // rows [7,22) positions 0..14, rows [22,40) positions 15..24 and 32..39 in two spans.
  const std::vector<AttentionSpan> spans{{0, 7, 25}, {7, 15, 0}, {22, 10, 15}, {32, 8, 32}};
  std::vector<int64_t> pos(kT);
  for (const AttentionSpan& sp : spans) {
    for (int64_t i = 0; i < sp.len; ++i) pos[sp.row + i] = sp.position + i;
  }
  // Q: the query columns of qkv (NH HD), O: the output's (NH VD), W: K | V.
  const int64_t N = kB * kT, Q = kNH * kHD, O = s.out_width(), W = s.kv_width(),
                QKV = s.qkv_width();
  std::vector<double> qkv(N * QKV), dout(N * O), out(N * O, 0), lse(kB * kNH * kT), dq(N * QKV, 0),
      kv(N * W), dkv(N * W, 0);
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t t = 0; t < kT; ++t) {
      const int64_t from = b * kT + pos[t], to = b * kT + t;
      for (int64_t c = 0; c < QKV; ++c) qkv[to * QKV + c] = r.qkv[from * QKV + c];
      for (int64_t c = 0; c < W; ++c) kv[to * W + c] = r.qkv[from * QKV + Q + c];
      for (int64_t c = 0; c < O; ++c) dout[to * O + c] = r.dout[from * O + c];
    }
  }
  std::fill(lse.begin(), lse.end(), -std::numeric_limits<double>::infinity());
  for (const AttentionSpan& q : spans) {
    for (const AttentionSpan& k : spans) {
      be->flash_attention_block_forward(t2(out, N), t2(lse, kB * kNH), t2(qkv, N), t2(kv, N), s, q,
                                        k, kTiles);
    }
  }
  for (const AttentionSpan& q : spans) {
    for (const AttentionSpan& k : spans) {
      be->flash_attention_block_backward(t2(dq, N), t2(dkv, N), t2(dout, N), t2(out, N), t2(qkv, N),
                                         t2(kv, N), t2(lse, kB * kNH), s, q, k, kTiles);
    }
  }
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t t = 0; t < kT; ++t) {
      const int64_t from = b * kT + pos[t], to = b * kT + t;
      for (int64_t c = 0; c < O; ++c) {
        expect_close(out[to * O + c], r.out[from * O + c], 1e-12, "out", to * O + c);
      }
      for (int64_t c = 0; c < Q; ++c) {
        expect_close(dq[to * QKV + c], r.dqkv[from * QKV + c], 1e-11, "dq", to * QKV + c);
      }
      for (int64_t c = 0; c < W; ++c) {
        expect_close(dkv[to * W + c], r.dqkv[from * QKV + Q + c], 1e-11, "dkv", to * W + c);
      }
      for (int64_t h = 0; h < kNH; ++h) {
        expect_close(lse[(b * kNH + h) * kT + t], r.lse[(b * kNH + h) * kT + pos[t]], 1e-12, "lse",
                     t);
      }
    }
  }
}

TEST(ContextAttention, BlockKernelOverSpansEqualsWholeSequence) {
  check_block_kernel_over_spans(shape_of(kT));
}

TEST(ContextAttention, BlockKernelOverSpansWithValueHeadDim) {
  check_block_kernel_over_spans(mla_shape_of(kT));      // VD > HD, K/V per head (MLA)
  check_block_kernel_over_spans(shape_of(kT, kKV, 5));  // VD < HD, grouped
}

TEST(ContextAttention, SplitsAndTheirErrors) {
  const SequenceSplit zig{4, CpSplit::zigzag}, con{4, CpSplit::contiguous};
  EXPECT_EQ(zig.positions(16, 1), (std::vector<int64_t>{2, 3, 12, 13}));
  EXPECT_EQ(con.positions(16, 1), (std::vector<int64_t>{4, 5, 6, 7}));
  try {
    zig.spans(20, 0);
    FAIL() << "20 tokens cannot be cut into 8 chunks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a multiple of 8"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_cp_split("striped", "parallel.cp_split"), Error);
  // Zigzag balances the causal pairs exactly; contiguous's last rank does 2cp-1 times the first's.
  int64_t zig_pairs[4] = {}, con_pairs[4] = {};
  for (int r = 0; r < 4; ++r) {
    for (int src = 0; src < 4; ++src) {
      for (const AttentionSpan& q : zig.spans(16, r)) {
        for (const AttentionSpan& k : zig.spans(16, src)) zig_pairs[r] += parallel::visible_pairs(q, k);
      }
      for (const AttentionSpan& q : con.spans(16, r)) {
        for (const AttentionSpan& k : con.spans(16, src)) con_pairs[r] += parallel::visible_pairs(q, k);
      }
    }
  }
  for (int r = 0; r < 4; ++r) EXPECT_EQ(zig_pairs[r], 16 * 17 / 2 / 4);
  EXPECT_EQ(con_pairs[0], 10);  // 4 x 4 causal: 4*5/2
  EXPECT_EQ(con_pairs[3], 12 * 4 + 10);
}

// One rank's run of ring attention for `kind` over the core shape `s` (T = the whole sequence),
// checked against the reference; `spec` is the same model for plan/'s formulas.
void run_ring(CpSplit kind, const AttentionShape& s, const plan::ModelSpec& spec) {
  comm::Communicator& world = *testing::mpi_world();
  const int cp = world.size(), rank = world.rank();
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const Reference r = reference(*be, s);
  const SequenceSplit split{cp, kind};
  const std::vector<int64_t> pos = split.positions(kT, rank);
  const int64_t Tl = kT / cp, N = kB * Tl, Q = s.out_width(), QKV = s.qkv_width();
  std::vector<double> qkv(N * QKV), dout(N * Q), out(N * Q), lse(kB * kNH * Tl), dqkv(N * QKV);
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t t = 0; t < Tl; ++t) {
      const int64_t from = b * kT + pos[t], to = b * Tl + t;
      std::copy_n(&r.qkv[from * QKV], QKV, &qkv[to * QKV]);
      std::copy_n(&r.dout[from * Q], Q, &dout[to * Q]);
    }
  }
  AttentionShape local = s;
  local.T = Tl;
  const size_t workspace_before = tracker.current(MemoryCategory::workspace);
  parallel::RingAttention ring(*be, tracker, world, split, local, kT, DType::f64, kTiles);
  // The ring's buffers (2 K/V + 3 dK/dV blocks) are what plan/ says.
  EXPECT_EQ(tracker.current(MemoryCategory::workspace) - workspace_before,
            static_cast<size_t>(plan::context_ring_buffer_bytes(spec, kB, kT, 8, {1, false, cp},
                                                                plan::CpMla::heads)));
  const comm::CommCounters before = world.counters();
  ring.forward(t2(out, N), t2(lse, kB * kNH), t2(qkv, N));
  const comm::CommCounters after_forward = world.counters();
  ring.backward(t2(dqkv, N), t2(dout, N), t2(out, N), t2(qkv, N), t2(lse, kB * kNH));
  const comm::CommCounters after_backward = world.counters();
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t t = 0; t < Tl; ++t) {
      const int64_t from = b * kT + pos[t], to = b * Tl + t;
      for (int64_t c = 0; c < Q; ++c) {
        expect_close(out[to * Q + c], r.out[from * Q + c], 1e-12, "out", to * Q + c);
      }
      for (int64_t c = 0; c < QKV; ++c) {
        expect_close(dqkv[to * QKV + c], r.dqkv[from * QKV + c], 1e-11, "dqkv", to * QKV + c);
      }
      for (int64_t h = 0; h < kNH; ++h) {
        expect_close(lse[(b * kNH + h) * Tl + t], r.lse[(b * kNH + h) * kT + pos[t]], 1e-12, "lse",
                     t);
      }
    }
  }
  // Bytes: one rank's K/V block is B * T/cp * KV (HD + VD) doubles, plan/'s block.
  const uint64_t block = static_cast<uint64_t>(N * s.KV * (s.HD + s.v_dim()) * 8);
  EXPECT_EQ(ring.block_bytes(), block);
  EXPECT_EQ(block, static_cast<uint64_t>(plan::context_ring_block_bytes(
                       spec, kB, kT, 8, {1, false, cp}, plan::CpMla::heads)));
  using comm::Collective;
  const plan::RingBytes want = plan::context_ring_bytes(cp, block);
  EXPECT_EQ(want.forward, (cp - 1) * block);
  EXPECT_EQ(want.backward, (2 * cp - 1) * block);
  EXPECT_EQ((after_forward - before).sent(Collective::send), want.forward);
  EXPECT_EQ((after_forward - before).received(Collective::recv), want.forward);
  EXPECT_EQ((after_backward - after_forward).sent(Collective::send), want.backward);
  EXPECT_EQ((after_backward - after_forward).received(Collective::recv), want.backward);
  // Balance: visible pairs per rank and pass, gathered. Backward visits forward's pairs.
  const parallel::RingCounters& counts = ring.counters();
  EXPECT_EQ(counts.forward.calls, 1);
  EXPECT_EQ(counts.backward.calls, 1);
  EXPECT_EQ(counts.backward.visible_pairs, counts.forward.visible_pairs);
  EXPECT_EQ(counts.backward.blocks_computed, counts.forward.blocks_computed);
  // Skipped span pairs: a query chunk a skips every key chunk after it. Zigzag's chunks i and
  // 2cp-1-i skip (2cp-1-i) + i = 2cp-1 chunks; contiguous's one chunk cp-1-rank.
  const int64_t skipped = kind == CpSplit::zigzag ? 2 * cp - 1 : cp - 1 - rank;
  const int64_t spans = kind == CpSplit::zigzag ? 2 : 1;
  EXPECT_EQ(counts.forward.blocks_skipped, skipped);
  EXPECT_EQ(counts.backward.blocks_skipped, skipped);
  EXPECT_EQ(counts.forward.blocks_computed + skipped, spans * spans * cp);
  std::vector<double> pairs(2 * cp, 0.0);
  pairs[rank] = static_cast<double>(counts.forward.visible_pairs);
  pairs[cp + rank] = static_cast<double>(counts.backward.visible_pairs);
  world.all_reduce(Tensor(pairs.data(), DType::f64, {2 * cp}));
  for (int pass = 0; pass < 2; ++pass) {
    const char* name = pass == 0 ? "forward" : "backward";
    double total = 0, mx = 0, mn = 1e300;
    for (int r = 0; r < cp; ++r) {
      const double p = pairs[pass * cp + r];
      total += p, mx = std::max(mx, p), mn = std::min(mn, p);
    }
    EXPECT_EQ(total, static_cast<double>(kT * (kT + 1) / 2)) << name;  // every causal pair once
    if (kind == CpSplit::zigzag) {
      EXPECT_EQ(mx, mn) << name << ": zigzag must balance the causal work exactly";
      EXPECT_EQ(mx, static_cast<double>(kT * (kT + 1) / 2 / cp)) << name;
    } else {
      EXPECT_GT(mx / (total / cp), 1.4) << name;
    }
    if (rank == 0) {
      std::printf("[ring cp=%d %s] %s visible pairs per rank max/mean %.3f, skipped blocks %lld\n",
                  cp, cp_split_name(kind), name, mx / (total / cp),
                  static_cast<long long>(skipped));
    }
  }
}

plan::ModelSpec gqa_spec() {
  plan::ModelSpec spec;
  spec.n_heads = kNH, spec.n_kv_heads = kKV, spec.head_dim = kHD;
  return spec;
}

TEST(MpiContextAttention, ZigzagRingEqualsOneProcess) {
  REQUIRE_MPI(2);
  run_ring(CpSplit::zigzag, shape_of(kT), gqa_spec());
}

TEST(MpiContextAttention, ContiguousRingEqualsOneProcess) {
  REQUIRE_MPI(2);
  run_ring(CpSplit::contiguous, shape_of(kT), gqa_spec());
}

// MLA's core: qk head dim 8 (nope 6 + rope 2), v head dim 12, K and V per query head (the ring
// sends per-head K/V, plan/'s MLA block).
TEST(MpiContextAttention, ZigzagRingWithValueHeadDimEqualsOneProcess) {
  REQUIRE_MPI(2);
  plan::ModelSpec spec;
  spec.n_heads = kNH, spec.n_kv_heads = kNH, spec.head_dim = kHD;
  spec.kv_lora_rank = 16, spec.qk_nope_dim = 6, spec.qk_rope_dim = 2, spec.v_head_dim = 12;
  run_ring(CpSplit::zigzag, mla_shape_of(kT), spec);
}

// Packed documents: sequence 0 holds documents [0,12) [12,30) [30,40), sequence 1 [0,25)
// [25,40). The zigzag ring under the document mask equals the one-process masked kernels, skips
// the span pairs wholly before their queries' documents in both sequences, and its visible pairs
// add up to the masked pairs of the whole sequence.
TEST(MpiContextAttention, DocumentMaskedZigzagRingEqualsOneProcess) {
  REQUIRE_MPI(2);
  comm::Communicator& world = *testing::mpi_world();
  const int cp = world.size(), rank = world.rank();
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  std::vector<int32_t> starts(kB * kT);
  for (int64_t t = 0; t < kT; ++t) {
    starts[t] = t < 12 ? 0 : t < 30 ? 12 : 30;
    starts[kT + t] = t < 25 ? 0 : 25;
  }
  AttentionShape s = shape_of(kT);
  s.documents = {starts.data(), kT, nullptr};
  const int64_t N = kB * kT, Q = kNH * kHD, QKV = s.qkv_width();
  std::vector<double> qkv = random_values(N * QKV, 1), dout = random_values(N * Q, 2);
  std::vector<double> out(N * Q), lse(kB * kNH * kT), dqkv(N * QKV);
  be->flash_attention_forward(t2(out, N), t2(lse, kB * kNH), t2(qkv, N), s, kTiles);
  be->flash_attention_backward(t2(dqkv, N), t2(dout, N), t2(out, N), t2(qkv, N), t2(lse, kB * kNH),
                               s, kTiles);
  const SequenceSplit split{cp, CpSplit::zigzag};
  const std::vector<int64_t> pos = split.positions(kT, rank);
  const int64_t Tl = kT / cp, Nl = kB * Tl;
  std::vector<double> lq(Nl * QKV), ld(Nl * Q), lo(Nl * Q), ll(kB * kNH * Tl), ldq(Nl * QKV);
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t t = 0; t < Tl; ++t) {
      std::copy_n(&qkv[(b * kT + pos[t]) * QKV], QKV, &lq[(b * Tl + t) * QKV]);
      std::copy_n(&dout[(b * kT + pos[t]) * Q], Q, &ld[(b * Tl + t) * Q]);
    }
  }
  LocalShape ls;
  ls.batch = kB, ls.seq = Tl, ls.heads = kNH, ls.kv_heads = kKV, ls.head_dim = kHD;
  parallel::RingAttention ring(*be, tracker, world, split, ls, kT, DType::f64, kTiles);
  ring.forward(t2(lo, Nl), t2(ll, kB * kNH), t2(lq, Nl), s.documents);
  ring.backward(t2(ldq, Nl), t2(ld, Nl), t2(lo, Nl), t2(lq, Nl), t2(ll, kB * kNH), s.documents);
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t t = 0; t < Tl; ++t) {
      const int64_t from = b * kT + pos[t], to = b * Tl + t;
      for (int64_t c = 0; c < Q; ++c) {
        expect_close(lo[to * Q + c], out[from * Q + c], 1e-12, "out", c);
      }
      for (int64_t c = 0; c < QKV; ++c) {
        expect_close(ldq[to * QKV + c], dqkv[from * QKV + c], 1e-11, "dqkv", c);
      }
    }
  }
  // Masked pairs of the whole batch: per query, keys [start, q].
  int64_t want_pairs = 0;
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t t = 0; t < kT; ++t) want_pairs += t - starts[b * kT + t] + 1;
  }
  const parallel::RingCounters& counts = ring.counters();
  std::vector<double> pairs(cp, 0.0);
  pairs[rank] = static_cast<double>(counts.forward.visible_pairs_batch);
  world.all_reduce(Tensor(pairs.data(), DType::f64, {cp}));
  double total = 0, mx = 0;
  for (double p : pairs) total += p, mx = std::max(mx, p);
  EXPECT_EQ(total, static_cast<double>(want_pairs));
  EXPECT_EQ(counts.backward.visible_pairs_batch, counts.forward.visible_pairs_batch);
  EXPECT_GE(counts.forward.blocks_skipped, 2 * cp - 1);  // at least the causal ones
  if (cp == 2 && rank == 0) {
    // Rank 0 holds [0,10) and [30,40): queries [30,40) skip keys [0,10) and [10,20) in both
    // sequences (starts 30 and 25), besides the 3 causal skips.
    EXPECT_EQ(counts.forward.blocks_skipped, 5);
  }
  if (rank == 0) {
    std::printf(
        "[ring cp=%d zigzag, documents] visible pairs %.0f of causal %lld, per rank "
        "max/mean %.3f\n",
        cp, total, static_cast<long long>(kB * kT * (kT + 1) / 2), mx / (total / cp));
  }
}

}  // namespace
}  // namespace trillion
