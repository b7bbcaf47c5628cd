// Core: bf16 rounding, tensor views, memory accounting, tensor table layout, Philox known answers.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "core/memory.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "core/tensor_table.h"

using namespace trillion;

TEST(Bf16, RoundsToNearestEven) {
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties go to even (1.0).
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 0x1p-8f)), 1.0f);
  // 1 + 3*2^-8 is halfway between 1.0078125 (odd) and 1.015625 (even): rounds up to even.
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 3 * 0x1p-8f)), 1.015625f);
  // Just above halfway rounds up.
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f)), 1.0078125f);
  EXPECT_EQ(bf16_to_float(float_to_bf16(-2.5f)), -2.5f);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::infinity()))));
  // The largest finite float rounds to infinity, as IEEE RNE demands.
  EXPECT_TRUE(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::max()))));
}

TEST(Bf16, EveryBf16ValueRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    bf16 x{static_cast<uint16_t>(b)};
    float f = bf16_to_float(x);
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_bf16(f).bits, x.bits);
  }
}

// The bulk conversion a bf16 recipe runs on every GEMM operand rounds each element exactly as
// float_to_bf16 does: every bit pattern of a float's top half with a spread of low halves (ties,
// NaN payloads, infinities, subnormals), contiguous (threaded above 64K elements) and strided.
TEST(Bf16, BulkConversionEqualsTheScalarOne) {
  std::vector<float> x;
  for (uint32_t hi = 0; hi < 65536; ++hi)
    for (uint32_t lo : {0x0000u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu, 0x1234u})
      x.push_back(std::bit_cast<float>(hi << 16 | lo));
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<bf16> out(n);
  floats_to_bf16(x.data(), 1, n, n, out.data());
  int mismatches = 0;
  for (int64_t i = 0; i < n; ++i) mismatches += out[i].bits != float_to_bf16(x[i]).bits;
  EXPECT_EQ(mismatches, 0);
  // Rows of 1000 out of rows of 1536 (a column block of a wider matrix).
  const int64_t rows = n / 1536, cols = 1000;
  std::vector<bf16> block(rows * cols);
  floats_to_bf16(x.data(), rows, cols, 1536, block.data());
  mismatches = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      mismatches += block[r * cols + c].bits != float_to_bf16(x[r * 1536 + c]).bits;
  EXPECT_EQ(mismatches, 0);
}

TEST(Tensor, ViewsRowsAndColumns) {
  float data[12];
  for (int i = 0; i < 12; ++i) data[i] = static_cast<float>(i);
  Tensor t(data, DType::f32, {3, 4});
  EXPECT_EQ(t.numel(), 12);
  EXPECT_TRUE(t.is_contiguous());
  Tensor r = t.rows(1, 3);
  EXPECT_EQ(r.size(0), 2);
  EXPECT_EQ(r.data<float>()[0], 4.0f);
  Tensor c = t.columns(1, 3);
  EXPECT_FALSE(c.is_contiguous());
  EXPECT_EQ(c.stride(0), 4);
  EXPECT_EQ(c.data<float>()[0], 1.0f);
  EXPECT_THROW(t.view({5, 2}), Error);
  EXPECT_THROW(t.data<double>(), Error);
}

TEST(Memory, TracksCurrentAndPeakByCategory) {
  MemoryTracker tracker;
  {
    Buffer a(tracker, MemoryCategory::parameters, DType::f32, 100);
    Buffer b(tracker, MemoryCategory::activations, DType::bf16, 10);
    EXPECT_EQ(tracker.current(MemoryCategory::parameters), 400u);
    EXPECT_EQ(tracker.current(MemoryCategory::activations), 20u);
    Buffer moved = std::move(b);
    EXPECT_EQ(tracker.current(MemoryCategory::activations), 20u);
  }
  EXPECT_EQ(tracker.current_total(), 0u);
  EXPECT_EQ(tracker.peak(MemoryCategory::parameters), 400u);
  EXPECT_EQ(tracker.peak_total(), 420u);
  tracker.reset_peaks();
  EXPECT_EQ(tracker.peak_total(), 0u);
}

TEST(TensorTable, LaysOutBackToBackWithoutPadding) {
  TensorTable table;
  table.add("a", {3, 5}, true);
  table.add("b", {7}, false);
  table.add("c", {2, 2}, true);
  EXPECT_EQ(table.total_elements(), 15 + 7 + 4);
  EXPECT_EQ(table.spec(table.index("c")).offset, 22);
  EXPECT_THROW(table.index("missing"), Error);
  MemoryTracker tracker;
  Buffer buf(tracker, MemoryCategory::parameters, DType::f64, table.total_elements());
  Tensor b = table.view(buf, "b");
  EXPECT_EQ(static_cast<double*>(b.raw()) - static_cast<double*>(buf.raw()), 15);
}

TEST(Philox, KnownAnswerVectors) {
  // Known-answer tests of Philox4x32-10 from the Random123 distribution (kat_vectors).
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (PhiloxCounter{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                          {0xffffffffu, 0xffffffffu}),
            (PhiloxCounter{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                          {0xa4093822u, 0x299f31d0u}),
            (PhiloxCounter{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

// The batched words stochastic rounding draws are block(i)[0] exactly, for runs of odd lengths
// (vector tails), across the 2^32 boundary of the counter's low word, and for seeds and streams
// whose high halves are set.
TEST(Philox, FirstWordsAreTheBlocksFirstWords) {
  for (const Philox rng : {Philox(1234, "quantize"), Philox(0xfedcba9876543210ull, ~0ull)}) {
    for (const uint64_t first : {uint64_t{0}, uint64_t{0xffffffffu} - 5, uint64_t{1} << 40}) {
      for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{33}}) {
        std::vector<uint32_t> words(static_cast<size_t>(n));
        rng.first_words(first, n, words.data());
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(words[i], rng.block(first + i)[0]) << "first " << first << " i " << i;
          EXPECT_EQ(Philox::unit(words[i]), rng.uniform(first + i));
        }
      }
    }
  }
}

TEST(Philox, NormalsHaveUnitMomentsAndDependOnlyOnIndex) {
  Philox rng(1234, "layers.0.attn.wq");
  double sum = 0, sum_sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double x = rng.normal(i);
    sum += x;
    sum_sq += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sum_sq / n, 1.0, 0.01);
  EXPECT_EQ(Philox(1234, "layers.0.attn.wq").normal(777), rng.normal(777));
  EXPECT_NE(Philox(1234, "layers.0.attn.wk").normal(777), rng.normal(777));
}
