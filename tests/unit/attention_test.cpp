// Tiled (FlashAttention-2) attention against the materialised reference, forward and backward:
// f64 to 1e-10 and f32 to 1e-5 over random shapes — sequence lengths that are not multiples of
// the tiles, 1..N heads, GQA ratios, batch > 1, explicit and automatic tile sizes; a value head
// dim VD smaller and larger than the query/key head dim HD (MLA), with and without a document
// mask.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "test_util.h"

using namespace trillion;
using namespace trillion::testing;

namespace {

struct Case {
  AttentionShape s;
  AttentionBlocks blocks;
};

template <typename T>
double max_rel_diff(const std::vector<T>& a, const std::vector<T>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

template <typename T>
void compare(const Case& c, double tol) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const AttentionShape& s = c.s;
  const int64_t N = s.B * s.T, W = s.qkv_width(), O = s.out_width();
  const DType dt = dtype_of<T>();
  auto cast = [](const std::vector<double>& v) { return std::vector<T>(v.begin(), v.end()); };
  auto qkv = cast(random_vector(N * W, 100 + s.T, 1.5)), dout = cast(random_vector(N * O, 200));
  std::vector<T> out_ref(N * O), out(N * O), probs(s.B * s.NH * s.T * s.T), lse(s.B * s.NH * s.T);
  std::vector<T> dqkv_ref(N * W), dqkv(N * W, T(3));
  be->attention_forward(Tensor(out_ref.data(), dt, {N, O}),
                        Tensor(probs.data(), dt, {s.B, s.NH, s.T, s.T}),
                        Tensor(qkv.data(), dt, {N, W}), s);
  be->flash_attention_forward(Tensor(out.data(), dt, {N, O}),
                              Tensor(lse.data(), dt, {s.B, s.NH, s.T}),
                              Tensor(qkv.data(), dt, {N, W}), s, c.blocks);
  EXPECT_LT(max_rel_diff(out, out_ref), tol) << "forward T=" << s.T;
  be->attention_backward(Tensor(dqkv_ref.data(), dt, {N, W}), Tensor(dout.data(), dt, {N, O}),
                         Tensor(qkv.data(), dt, {N, W}),
                         Tensor(probs.data(), dt, {s.B, s.NH, s.T, s.T}), s);
  be->flash_attention_backward(Tensor(dqkv.data(), dt, {N, W}), Tensor(dout.data(), dt, {N, O}),
                               Tensor(out.data(), dt, {N, O}), Tensor(qkv.data(), dt, {N, W}),
                               Tensor(lse.data(), dt, {s.B, s.NH, s.T}), s, c.blocks);
  EXPECT_LT(max_rel_diff(dqkv, dqkv_ref), tol) << "backward T=" << s.T;
}

std::vector<Case> cases() {
  std::vector<Case> v;
  // B, T, NH, KV, HD with tiles that do not divide T, and automatic tiles.
  v.push_back({{1, 1, 1, 1, 4}, {4, 4}});
  v.push_back({{2, 37, 4, 2, 8}, {8, 8}});
  v.push_back({{3, 50, 6, 3, 4}, {16, 8}});
  v.push_back({{1, 70, 8, 1, 16}, {8, 32}});
  v.push_back({{2, 129, 2, 2, 32}, {0, 0}});
  v.push_back({{1, 300, 4, 4, 8}, {64, 64}});
  // T >= 512: the fp32 kernels pack V and K per head (cpu_flash_block.cpp's kPackFrom).
  v.push_back({{1, 530, 2, 1, 16}, {64, 48}});
  Philox rng(9, "shapes");
  for (int i = 0; i < 6; ++i) {
    const int64_t kv = 1 + rng.below(4 * i, 3), group = 1 + rng.below(4 * i + 1, 3);
    v.push_back({{1 + static_cast<int64_t>(rng.below(4 * i + 2, 3)),
                  1 + static_cast<int64_t>(rng.below(4 * i + 3, 97)), kv * group, kv, 8},
                 {1 + static_cast<int64_t>(rng.below(4 * i + 5, 40)),
                  1 + static_cast<int64_t>(rng.below(4 * i + 6, 40))}});
  }
  return v;
}

// Value head dim != query/key head dim (MLA's qk 192 vs v 128, scaled down): VD < HD and
// VD > HD, MHA and GQA, one case under a document mask (packed documents [0,9) [9,23) [23,T) in
// every sequence).
std::vector<Case> value_dim_cases() {
  std::vector<Case> v;
  for (const int64_t kv : {4, 2}) {
    v.push_back({{2, 37, 4, kv, 12, 8}, {8, 8}});
    v.push_back({{1, 50, 4, kv, 8, 12}, {16, 8}});
    v.push_back({{2, 29, 4, kv, 12, 8}, {0, 0}});
  }
  return v;
}

template <typename T>
void compare_value_dims(double tol) {
  for (Case c : value_dim_cases()) compare<T>(c, tol);
  Case masked{{2, 33, 4, 2, 12, 8}, {8, 4}};
  std::vector<int32_t> starts(masked.s.B * masked.s.T);
  for (int64_t b = 0; b < masked.s.B; ++b) {
    for (int64_t t = 0; t < masked.s.T; ++t)
      starts[b * masked.s.T + t] = t < 9 ? 0 : t < 23 ? 9 : 23;
  }
  masked.s.documents = {starts.data(), masked.s.T, nullptr};
  compare<T>(masked, tol);
  masked.s.VD = 16;  // VD > HD under the mask too
  compare<T>(masked, tol);
}

}  // namespace

TEST(FlashAttention, ValueHeadDimMatchesMaterialised) {
  compare_value_dims<double>(1e-10);
  compare_value_dims<float>(1e-5);
}

TEST(FlashAttention, MatchesMaterialisedInF64) {
  for (const Case& c : cases()) compare<double>(c, 1e-10);
}

TEST(FlashAttention, MatchesMaterialisedInF32) {
  for (const Case& c : cases()) compare<float>(c, 1e-5);
}

TEST(FlashAttention, WorkspaceGrowsLinearlyNotQuadratically) {
  // Workspace of the tiled kernel vs the materialised one (which also keeps B*NH*T*T probs).
  auto workspace = [](int64_t T, bool tiled) {
    MemoryTracker tracker;
    auto be = make_cpu_backend(tracker);
    AttentionShape s{1, T, 2, 2, 16};
    Buffer qkv(tracker, MemoryCategory::activations, DType::f32, T * s.qkv_width());
    Buffer out(tracker, MemoryCategory::activations, DType::f32, T * 32);
    Buffer dqkv(tracker, MemoryCategory::activations, DType::f32, T * s.qkv_width());
    tracker.reset_peaks();
    const size_t before = tracker.peak_total();
    if (tiled) {
      Buffer lse(tracker, MemoryCategory::workspace, DType::f32, 2 * T);
      be->flash_attention_forward(out.view(0, {T, 32}), lse.view(0, {1, 2, T}),
                                  qkv.view(0, {T, s.qkv_width()}), s, {64, 64});
      be->flash_attention_backward(dqkv.view(0, {T, s.qkv_width()}), out.view(0, {T, 32}),
                                   out.view(0, {T, 32}), qkv.view(0, {T, s.qkv_width()}),
                                   lse.view(0, {1, 2, T}), s, {64, 64});
    } else {
      Buffer probs(tracker, MemoryCategory::workspace, DType::f32, 2 * T * T);
      be->attention_forward(out.view(0, {T, 32}), probs.view(0, {1, 2, T, T}),
                            qkv.view(0, {T, s.qkv_width()}), s);
      be->attention_backward(dqkv.view(0, {T, s.qkv_width()}), out.view(0, {T, 32}),
                             qkv.view(0, {T, s.qkv_width()}), probs.view(0, {1, 2, T, T}), s);
    }
    return static_cast<double>(tracker.peak_total() - before);
  };
  const double t1 = workspace(256, true), t4 = workspace(1024, true);
  const double m1 = workspace(256, false), m4 = workspace(1024, false);
  EXPECT_LT(t4 / t1, 4.5);   // linear: 4x the sequence, ~4x (plus constant tiles)
  EXPECT_GT(m4 / m1, 15.0);  // quadratic: ~16x
}

TEST(FlashAttention, ValueHeadDimHonoursDocumentMask) {
  // Packed documents [0,9) [9,23) [23,33) in both sequences: changing every column of the first
  // document's rows leaves the other documents' outputs unchanged (materialised and tiled, VD
  // below and above HD) and does change the first document's.
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  for (const int64_t vd : {8, 16}) {
    AttentionShape s{2, 33, 4, 2, 12, vd};
    std::vector<int32_t> starts(s.B * s.T);
    for (int64_t b = 0; b < s.B; ++b) {
      for (int64_t t = 0; t < s.T; ++t) starts[b * s.T + t] = t < 9 ? 0 : t < 23 ? 9 : 23;
    }
    s.documents = {starts.data(), s.T, nullptr};
    const int64_t N = s.B * s.T, W = s.qkv_width(), O = s.out_width();
    auto qkv = random_vector(N * W, 71);
    auto run = [&](bool tiled) {
      std::vector<double> out(N * O), probs(s.B * s.NH * s.T * s.T), lse(s.B * s.NH * s.T);
      if (tiled) {
        be->flash_attention_forward(Tensor(out.data(), DType::f64, {N, O}),
                                    Tensor(lse.data(), DType::f64, {s.B, s.NH, s.T}),
                                    Tensor(qkv.data(), DType::f64, {N, W}), s, {8, 4});
      } else {
        be->attention_forward(Tensor(out.data(), DType::f64, {N, O}),
                              Tensor(probs.data(), DType::f64, {s.B, s.NH, s.T, s.T}),
                              Tensor(qkv.data(), DType::f64, {N, W}), s);
      }
      return out;
    };
    const auto before_tiled = run(true), before = run(false);
    const auto saved = qkv;
    for (int64_t b = 0; b < s.B; ++b) {
      for (int64_t i = b * s.T * W; i < (b * s.T + 9) * W; ++i) qkv[i] += 1.0;
    }
    const auto after_tiled = run(true), after = run(false);
    qkv = saved;
    for (int64_t b = 0; b < s.B; ++b) {
      for (int64_t t = 0; t < s.T; ++t) {
        double moved = 0, moved_tiled = 0;
        for (int64_t c = 0; c < O; ++c) {
          const int64_t i = (b * s.T + t) * O + c;
          moved = std::max(moved, std::abs(after[i] - before[i]));
          moved_tiled = std::max(moved_tiled, std::abs(after_tiled[i] - before_tiled[i]));
        }
        if (t < 9) {
          EXPECT_GT(moved, 1e-3) << "t " << t;
          EXPECT_GT(moved_tiled, 1e-3) << "t " << t;
        } else {
          EXPECT_LT(moved, 1e-14) << "VD " << vd << " t " << t;
          EXPECT_LT(moved_tiled, 1e-14) << "VD " << vd << " t " << t;
        }
      }
    }
  }
}
