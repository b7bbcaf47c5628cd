// The low-precision formats against their definitions (OCP FP8 1.0, OCP MX 1.0): every code of
// E4M3, E5M2, E2M1 and E8M0 is the value its bit fields define and round-trips; the largest finite values are 448, 57344 and 6; the smallest
// subnormals 2^-9, 2^-16 and 0.5; every midpoint between neighbours rounds to the even code;
// overflow saturates; stochastic rounding is unbiased.
#include "core/minifloat.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/philox.h"

namespace trillion {
namespace {

// The finite non-negative values of a format in increasing order, with their codes.
std::vector<std::pair<float, uint8_t>> grid(MiniFormat f) {
  std::vector<std::pair<float, uint8_t>> g;
  for (int c = 0; c < info(f).codes; ++c) {
    const float v = decode(f, static_cast<uint8_t>(c));
    if (std::isfinite(v) && !std::signbit(v)) g.push_back({v, static_cast<uint8_t>(c)});
  }
  std::sort(g.begin(), g.end());
  return g;
}

TEST(MiniFloat, EveryCodeRoundTrips) {
  for (MiniFormat f : {MiniFormat::e4m3, MiniFormat::e5m2, MiniFormat::e2m1, MiniFormat::e8m0}) {
    int nans = 0;
    for (int c = 0; c < info(f).codes; ++c) {
      const float v = decode(f, static_cast<uint8_t>(c));
      if (std::isnan(v)) {
        ++nans;
        continue;
      }
      EXPECT_EQ(encode(f, v), c) << info(f).name << " code " << c << " value " << v;
    }
    // E4M3: S.1111.111 (2); E5M2: S.11111.{01,10,11} (6); E2M1: none; E8M0: 0xFF.
    const int expected = f == MiniFormat::e4m3   ? 2
                         : f == MiniFormat::e5m2 ? 6
                         : f == MiniFormat::e2m1 ? 0
                                                 : 1;
    EXPECT_EQ(nans, expected) << info(f).name;
  }
}

// Every code's value is the format's definition, computed here from its bit fields alone:
// (-1)^s 2^(e - bias) (1 + m / 2^M) for e > 0, (-1)^s 2^(1 - bias) (m / 2^M) for e = 0 (OCP FP8
// 1.0 §5.3, OCP MX 1.0 §5.3.3); E8M0 is 2^(e - 127). The special codes are the tables': E4M3's
// S.1111.111 and E5M2's S.11111.{01,10,11} NaN, E5M2's S.11111.00 infinite, E8M0's 0xFF NaN.
TEST(MiniFloat, EveryCodeIsItsFormatsDefinition) {
  for (MiniFormat f : {MiniFormat::e4m3, MiniFormat::e5m2, MiniFormat::e2m1, MiniFormat::e8m0}) {
    const MiniFormatInfo& fi = info(f);
    const int E = fi.exponent_bits, M = fi.mantissa_bits;
    for (int c = 0; c < fi.codes; ++c) {
      const float v = decode(f, static_cast<uint8_t>(c));
      const int sign = fi.has_sign ? (c >> (E + M)) & 1 : 0;
      const int e = (c >> M) & ((1 << E) - 1), m = c & ((1 << M) - 1);
      const bool all_ones = e == (1 << E) - 1;
      if (f == MiniFormat::e8m0) {
        if (c == 0xFF) {
          EXPECT_TRUE(std::isnan(v)) << "e8m0 0xFF";
        } else {
          EXPECT_EQ(v, std::ldexp(1.0f, c - 127)) << "e8m0 code " << c;
        }
        continue;
      }
      if (f == MiniFormat::e4m3 && all_ones && m == (1 << M) - 1) {
        EXPECT_TRUE(std::isnan(v)) << "e4m3 code " << c;
        continue;
      }
      if (f == MiniFormat::e5m2 && all_ones) {
        if (m == 0) {
          EXPECT_TRUE(std::isinf(v) && std::signbit(v) == (sign == 1)) << "e5m2 code " << c;
        } else {
          EXPECT_TRUE(std::isnan(v)) << "e5m2 code " << c;
        }
        continue;
      }
      const double magnitude =
          e == 0 ? std::ldexp(static_cast<double>(m) / (1 << M), 1 - fi.bias)
                 : std::ldexp(1.0 + static_cast<double>(m) / (1 << M), e - fi.bias);
      const double want = sign ? -magnitude : magnitude;
      EXPECT_EQ(static_cast<double>(v), want) << fi.name << " code " << c;
      EXPECT_EQ(std::signbit(v), sign == 1) << fi.name << " code " << c;  // -0 included
    }
  }
}

TEST(MiniFloat, RangesAreTheSpecifications) {
  EXPECT_EQ(grid(MiniFormat::e4m3).back().first, 448.0f);
  EXPECT_EQ(grid(MiniFormat::e5m2).back().first, 57344.0f);
  EXPECT_EQ(grid(MiniFormat::e2m1).back().first, 6.0f);
  EXPECT_EQ(grid(MiniFormat::e4m3)[1].first, std::ldexp(1.0f, -9));
  EXPECT_EQ(grid(MiniFormat::e5m2)[1].first, std::ldexp(1.0f, -16));
  EXPECT_EQ(grid(MiniFormat::e4m3).size(), 127u);  // 0 and 126 positive finite values
  EXPECT_EQ(grid(MiniFormat::e5m2).size(), 124u);  // 0 and 123, then inf
  std::vector<float> e2m1;
  for (auto [v, c] : grid(MiniFormat::e2m1)) e2m1.push_back(v);
  EXPECT_EQ(e2m1, (std::vector<float>{0, 0.5f, 1, 1.5f, 2, 3, 4, 6}));
  EXPECT_EQ(decode(MiniFormat::e8m0, 127), 1.0f);
  EXPECT_EQ(decode(MiniFormat::e8m0, 0), std::ldexp(1.0f, -127));
  EXPECT_EQ(decode(MiniFormat::e8m0, 254), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isinf(decode(MiniFormat::e5m2, 0x7C)));
}

TEST(MiniFloat, MidpointsRoundToEvenAndOverflowSaturates) {
  for (MiniFormat f : {MiniFormat::e4m3, MiniFormat::e5m2, MiniFormat::e2m1}) {
    const auto g = grid(f);
    for (size_t i = 0; i + 1 < g.size(); ++i) {
      const double lo = g[i].first, hi = g[i + 1].first, mid = (lo + hi) / 2;
      const uint8_t even = (g[i].second & 1) == 0 ? g[i].second : g[i + 1].second;
      EXPECT_EQ(encode(f, static_cast<float>(mid)), even) << info(f).name << " " << mid;
      EXPECT_EQ(encode(f, std::nextafter(static_cast<float>(mid), 0.0f)), g[i].second);
      EXPECT_EQ(encode(f, std::nextafter(static_cast<float>(mid), 1e30f)), g[i + 1].second);
      EXPECT_EQ(round_to(f, static_cast<float>(-lo)), static_cast<float>(-lo));
    }
    const float top = static_cast<float>(info(f).max_finite);
    EXPECT_EQ(round_to(f, top * 1.5f), top) << info(f).name;
    EXPECT_EQ(round_to(f, -1e30f), -top) << info(f).name;
  }
  EXPECT_EQ(round_to(MiniFormat::e4m3, INFINITY), 448.0f);  // no infinity: saturates
  EXPECT_TRUE(std::isinf(round_to(MiniFormat::e5m2, INFINITY)));
  EXPECT_TRUE(std::isnan(round_to(MiniFormat::e4m3, NAN)));
  EXPECT_TRUE(std::isnan(round_to(MiniFormat::e5m2, NAN)));
  // E8M0 holds powers of two: 3 * 2^-4 is a tie between 2^-4 and 2^-3 in value, not in the
  // exponent's code; 1.4 rounds to 1, 1.6 to 2.
  EXPECT_EQ(round_to(MiniFormat::e8m0, 1.4f), 1.0f);
  EXPECT_EQ(round_to(MiniFormat::e8m0, 1.6f), 2.0f);
  EXPECT_EQ(round_to(MiniFormat::e8m0, 0x1p-5f), 0x1p-5f);
}

TEST(MiniFloat, StochasticRoundingIsUnbiasedBetweenNeighbours) {
  const Philox rng(7, "stochastic-rounding-test");
  // 0.3 lies between E2M1's 0 and 0.5, 60% of the way up... (0.3 / 0.5 = 0.6).
  const int n = 200000;
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    const float v =
        decode(MiniFormat::e2m1, encode_stochastic(MiniFormat::e2m1, 0.3f, rng.uniform(i)));
    ASSERT_TRUE(v == 0.0f || v == 0.5f);
    sum += v;
  }
  EXPECT_NEAR(sum / n, 0.3, 0.003);  // 4.5 standard errors (0.5 * sqrt(0.24 / n) = 0.00055)
  // A representable value never moves.
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(decode(MiniFormat::e4m3, encode_stochastic(MiniFormat::e4m3, 1.125f, rng.uniform(i))),
              1.125f);
  }
}

}  // namespace
}  // namespace trillion

namespace trillion {
namespace {

// The quantisers' fast encoders give encode's (and encode_stochastic's, for a uniform drawn per
// probe) code for every finite float it was tried on, and so does the row encoder:
// every code's value, the midpoints between neighbours and the floats on either side of them,
// and ~4.3 million float bit patterns spread over the whole finite range, both signs.
TEST(MiniFloat, FastEncoderIsEncodeOnFiniteInput) {
  for (MiniFormat f : {MiniFormat::e4m3, MiniFormat::e5m2, MiniFormat::e2m1}) {
    std::vector<float> probes;
    std::vector<float> values;
    for (int c = 0; c < info(f).codes; ++c) {
      const float v = decode(f, static_cast<uint8_t>(c));
      if (std::isfinite(v) && v >= 0) values.push_back(v);
    }
    std::sort(values.begin(), values.end());
    for (size_t i = 0; i + 1 < values.size(); ++i) {
      const float mid = 0.5f * (values[i] + values[i + 1]);
      for (float p : {values[i], mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
        probes.push_back(p);
      }
    }
    for (uint32_t u = 0; u < 0x7f800000u; u += 997) {
      float x;
      std::memcpy(&x, &u, sizeof x);
      probes.push_back(x);
    }
    int64_t checked = 0;
    for (float p : probes) {
      for (float x : {p, -p}) {
        ASSERT_EQ(encode_finite_fast(f, x), encode(f, x))
            << info(f).name << " x = " << x << " (bits " << std::hex
            << std::bit_cast<uint32_t>(x) << ")";
        const double u = Philox(3, "fast-encoder").uniform(static_cast<uint64_t>(checked));
        ASSERT_EQ(encode_stochastic_fast(f, x, u), encode_stochastic(f, x, u))
            << info(f).name << " x = " << x << " u = " << u;
        ++checked;
      }
    }
    EXPECT_GT(checked, 4'000'000);
    // The quantisers' row encoder: the same codes for every probe and both signs, scaled by a
    // power-of-two divisor (exact) and by one that is not (the division rounds first).
    for (const float divisor : {1.0f, 0.25f, 3.0f}) {
      for (const float sign : {1.0f, -1.0f}) {
        std::vector<float> row(probes.size());
        for (size_t i = 0; i < probes.size(); ++i) {
          row[i] = sign * probes[i] * divisor;
          if (!std::isfinite(row[i])) row[i] = 0;  // finite input only, as the quantisers give
        }
        std::vector<uint8_t> codes(row.size());
        encode_scaled_row(f, row.data(), divisor, codes.data(), static_cast<int64_t>(row.size()));
        for (size_t i = 0; i < row.size(); ++i) {
          ASSERT_EQ(codes[i], encode(f, row[i] / divisor))
              << info(f).name << " x = " << row[i] << " / " << divisor;
        }
        // Stochastic rounding's row encoder, against encode_stochastic on the same uniforms: a
        // third of the words from Philox, the others the two words either side of the value's
        // remainder (where u < rem flips), and the extremes 0 and ~0.
        std::vector<uint32_t> words(row.size());
        Philox(5, "row-encoder").first_words(0, static_cast<int64_t>(words.size()), words.data());
        const int shift = 23 - info(f).mantissa_bits;
        for (size_t i = 0; i < row.size(); ++i) {
          const uint32_t dropped = std::bit_cast<uint32_t>(row[i] / divisor) & ((1u << shift) - 1);
          if (i % 3 == 1) words[i] = dropped << (32 - shift);
          if (i % 3 == 2) words[i] = (dropped << (32 - shift)) - 1;
        }
        words[0] = 0, words[3] = ~0u;
        encode_stochastic_row(f, row.data(), divisor, words.data(), codes.data(),
                              static_cast<int64_t>(row.size()));
        for (size_t i = 0; i < row.size(); ++i) {
          ASSERT_EQ(codes[i], encode_stochastic(f, row[i] / divisor, Philox::unit(words[i])))
              << info(f).name << " x = " << row[i] << " / " << divisor << " word " << words[i];
        }
      }
    }
  }
}

}  // namespace
}  // namespace trillion
