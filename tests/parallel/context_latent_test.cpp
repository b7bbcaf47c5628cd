// MLA's latent ring (parallel/context.h forward_latent / backward_latent) against the one-process
// tiled kernels on the whole sequence, in f64, under mpirun (CTest's parallel_mpi_2 / _4: cp =
// the world size, zigzag). The whole sequence's latent [N, DC + DR] is up-projected by one Wkv_b
// into per-head K | V (k_rope shared by every head), attended, and the K/V gradients projected
// back: d latent = (sum_h dK_nope,h Wk_h + dV_h Wv_h | sum_h dK_rope,h), dWkv_b = sum_n dKV^T c.
// Every rank's out, lse, dQ and latent-gradient rows equal the reference rows at their global
// positions to 1e-11, its dqkv K/V columns are zero, the Wkv_b wgrads summed over the ranks equal
// the reference's, and the bytes sent and the ring's buffers are plan/context_ring.h's latent
// formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "../comm/mpi_env.h"
#include "core/philox.h"
#include "parallel/context.h"
#include "plan/context_ring.h"

namespace trillion {
namespace {

constexpr int64_t kB = 2, kT = 40, kNH = 4, kDN = 6, kDR = 2, kHD = kDN + kDR, kVD = 12, kDC = 5;
constexpr int64_t kL = kDC + kDR, kW = kNH * (kHD + kVD), kRows = kDN + kVD;  // Wkv_b rows per head
constexpr AttentionBlocks kTiles{4, 4};

std::vector<double> random_values(int64_t n, uint64_t seed) {
  Philox rng(seed, "context-latent-test");
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = rng.normal(i);
  return v;
}

Tensor t2(std::vector<double>& v, int64_t rows) {
  return Tensor(v.data(), DType::f64, {rows, static_cast<int64_t>(v.size()) / rows});
}

// kv [rows, K | V] (K: per head [nope | rope], V: per head) from latent [rows, c | rope].
void up(const double* lat, double* kv, int64_t rows, const std::vector<double>& w) {
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t h = 0; h < kNH; ++h) {
      for (int64_t j = 0; j < kRows; ++j) {
        double s = 0;
        for (int64_t c = 0; c < kDC; ++c) s += lat[n * kL + c] * w[(h * kRows + j) * kDC + c];
        kv[n * kW + (j < kDN ? h * kHD + j : kNH * kHD + h * kVD + j - kDN)] = s;
      }
      for (int64_t j = 0; j < kDR; ++j) kv[n * kW + h * kHD + kDN + j] = lat[n * kL + kDC + j];
    }
  }
}

// d_lat [rows, L] (written) and dw (added) from dkv [rows, K | V] and latent [rows, L].
void down(const double* dkv, const double* lat, double* d_lat, int64_t rows,
          const std::vector<double>& w, std::vector<double>& dw) {
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t c = 0; c < kL; ++c) d_lat[n * kL + c] = 0;
    for (int64_t h = 0; h < kNH; ++h) {
      for (int64_t j = 0; j < kRows; ++j) {
        const double g = dkv[n * kW + (j < kDN ? h * kHD + j : kNH * kHD + h * kVD + j - kDN)];
        for (int64_t c = 0; c < kDC; ++c) {
          d_lat[n * kL + c] += g * w[(h * kRows + j) * kDC + c];
          dw[(h * kRows + j) * kDC + c] += g * lat[n * kL + c];
        }
      }
      for (int64_t j = 0; j < kDR; ++j) d_lat[n * kL + kDC + j] += dkv[n * kW + h * kHD + kDN + j];
    }
  }
}

void expect_close(double got, double want, double tol, const char* what, int64_t i) {
  ASSERT_NEAR(got, want, tol * (1 + std::abs(want))) << what << " element " << i;
}

TEST(MpiContextAttention, LatentRingEqualsOneProcess) {
  REQUIRE_MPI(2);
  comm::Communicator& world = *testing::mpi_world();
  const int cp = world.size(), rank = world.rank();
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const AttentionShape s{kB, kT, kNH, kNH, kHD, kVD};
  const int64_t N = kB * kT, Q = kNH * kHD, O = s.out_width(), QKV = s.qkv_width();
  ASSERT_EQ(QKV, Q + kW);
  // The whole sequence, one process.
  std::vector<double> lat = random_values(N * kL, 11), w = random_values(kNH * kRows * kDC, 12);
  std::vector<double> q = random_values(N * Q, 13), dout = random_values(N * O, 14);
  std::vector<double> kv(N * kW), qkv(N * QKV), out(N * O, 0), lse(kB * kNH * kT), dqkv(N * QKV, 0);
  up(lat.data(), kv.data(), N, w);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < Q; ++c) qkv[n * QKV + c] = q[n * Q + c];
    for (int64_t c = 0; c < kW; ++c) qkv[n * QKV + Q + c] = kv[n * kW + c];
  }
  be->flash_attention_forward(t2(out, N), t2(lse, kB * kNH), t2(qkv, N), s, kTiles);
  be->flash_attention_backward(t2(dqkv, N), t2(dout, N), t2(out, N), t2(qkv, N), t2(lse, kB * kNH),
                               s, kTiles);
  std::vector<double> dkv(N * kW), d_lat(N * kL), dw(w.size(), 0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < kW; ++c) dkv[n * kW + c] = dqkv[n * QKV + Q + c];
  }
  down(dkv.data(), lat.data(), d_lat.data(), N, w, dw);

  // This rank's rows, and the latent ring.
  const SequenceSplit split{cp, CpSplit::zigzag};
  const std::vector<int64_t> pos = split.positions(kT, rank);
  const int64_t Tl = kT / cp, Nl = kB * Tl;
  std::vector<double> l_qkv(Nl * QKV), l_dout(Nl * O), l_ckv(Nl * kDC), l_rope(Nl * kDR);
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t t = 0; t < Tl; ++t) {
      const int64_t from = b * kT + pos[t], to = b * Tl + t;
      for (int64_t c = 0; c < QKV; ++c) l_qkv[to * QKV + c] = qkv[from * QKV + c];
      for (int64_t c = 0; c < O; ++c) l_dout[to * O + c] = dout[from * O + c];
      for (int64_t c = 0; c < kDC; ++c) l_ckv[to * kDC + c] = lat[from * kL + c];
      for (int64_t c = 0; c < kDR; ++c) l_rope[to * kDR + c] = lat[from * kL + kDC + c];
    }
  }
  AttentionShape local = s;
  local.T = Tl;
  plan::ModelSpec spec;
  spec.n_heads = kNH, spec.n_kv_heads = kNH, spec.head_dim = kHD;
  spec.kv_lora_rank = kDC, spec.qk_nope_dim = kDN, spec.qk_rope_dim = kDR, spec.v_head_dim = kVD;
  ASSERT_TRUE(plan::context_ring_latent(spec, {1, false, cp}));  // 7 < 80 elements per token
  const size_t workspace_before = tracker.current(MemoryCategory::workspace);
  parallel::RingAttention ring(*be, tracker, world, split, local, kT, DType::f64, kTiles, kL);
  EXPECT_EQ(tracker.current(MemoryCategory::workspace) - workspace_before,
            static_cast<size_t>(plan::context_ring_buffer_bytes(spec, kB, kT, 8, {1, false, cp})));
  EXPECT_EQ(plan::context_ring_buffer_bytes(spec, kB, kT, 8, {1, false, cp}),
            (5 * Nl * kL + 2 * Nl * kW) * 8);
  std::vector<double> l_dw(w.size(), 0);
  ContextAttention::LatentKeys keys;
  keys.up = [&](const Tensor& latent, const Tensor& block) {
    ASSERT_TRUE(latent.is_contiguous() && block.is_contiguous());
    up(latent.data<double>(), block.data<double>(), latent.size(0), w);
  };
  keys.down = [&](const Tensor& block_grad, const Tensor& latent, const Tensor& latent_grad) {
    ASSERT_TRUE(block_grad.is_contiguous() && latent.is_contiguous() &&
                latent_grad.is_contiguous());
    down(block_grad.data<double>(), latent.data<double>(), latent_grad.data<double>(),
         latent.size(0), w, l_dw);
  };
  std::vector<double> l_out(Nl * O), l_lse(kB * kNH * Tl), l_dqkv(Nl * QKV, 1.0);
  std::vector<double> l_dckv(Nl * kDC), l_drope(Nl * kDR);
  const comm::CommCounters before = world.counters();
  ring.forward_latent(t2(l_out, Nl), t2(l_lse, kB * kNH), t2(l_qkv, Nl), t2(l_ckv, Nl),
                      t2(l_rope, Nl), keys);
  const comm::CommCounters after_forward = world.counters();
  ring.backward_latent(t2(l_dqkv, Nl), t2(l_dckv, Nl), t2(l_drope, Nl), t2(l_dout, Nl),
                       t2(l_out, Nl), t2(l_qkv, Nl), t2(l_ckv, Nl), t2(l_rope, Nl),
                       t2(l_lse, kB * kNH), keys);
  const comm::CommCounters after_backward = world.counters();
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t t = 0; t < Tl; ++t) {
      const int64_t from = b * kT + pos[t], to = b * Tl + t;
      for (int64_t c = 0; c < O; ++c) {
        expect_close(l_out[to * O + c], out[from * O + c], 1e-12, "out", to * O + c);
      }
      for (int64_t c = 0; c < Q; ++c) {
        expect_close(l_dqkv[to * QKV + c], dqkv[from * QKV + c], 1e-11, "dq", to * QKV + c);
      }
      for (int64_t c = Q; c < QKV; ++c) EXPECT_EQ(l_dqkv[to * QKV + c], 0.0) << "dkv " << c;
      for (int64_t c = 0; c < kDC; ++c) {
        expect_close(l_dckv[to * kDC + c], d_lat[from * kL + c], 1e-11, "d ckv", to * kDC + c);
      }
      for (int64_t c = 0; c < kDR; ++c) {
        expect_close(l_drope[to * kDR + c], d_lat[from * kL + kDC + c], 1e-11, "d rope",
                     to * kDR + c);
      }
      for (int64_t h = 0; h < kNH; ++h) {
        expect_close(l_lse[(b * kNH + h) * Tl + t], lse[(b * kNH + h) * kT + pos[t]], 1e-12, "lse",
                     t);
      }
    }
  }
  // Wkv_b's wgrad: each rank holds the share of the blocks it computed; their sum is the whole.
  world.all_reduce(Tensor(l_dw.data(), DType::f64, {static_cast<int64_t>(l_dw.size())}));
  for (size_t i = 0; i < dw.size(); ++i) {
    expect_close(l_dw[i], dw[i], 1e-11, "d wkv_b", static_cast<int64_t>(i));
  }
  // Bytes: latent blocks of B * T/cp * (DC + DR) doubles, the same hops as the per-head ring.
  const uint64_t block = static_cast<uint64_t>(Nl * kL * 8);
  EXPECT_EQ(ring.block_bytes(), block);
  EXPECT_EQ(block,
            static_cast<uint64_t>(plan::context_ring_block_bytes(spec, kB, kT, 8, {1, false, cp})));
  const plan::RingBytes want = plan::context_ring_bytes(cp, block);
  using comm::Collective;
  EXPECT_EQ((after_forward - before).sent(Collective::send), want.forward);
  EXPECT_EQ((after_backward - after_forward).sent(Collective::send), want.backward);
  EXPECT_EQ(want.total(), (3 * static_cast<uint64_t>(cp) - 2) * block);
}

}  // namespace
}  // namespace trillion
