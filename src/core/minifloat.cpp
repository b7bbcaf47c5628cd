// See minifloat.h. Values are computed in double, where every step below is exact: a float
// divided by a power of two, rounded to an integer, multiplied back.
#include "core/minifloat.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <array>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace trillion {

namespace {

constexpr MiniFormatInfo kInfo[] = {
    {"e4m3", 4, 3, 7, true, false, true, 256, 448.0},
    {"e5m2", 5, 2, 15, true, true, true, 256, 57344.0},
    {"e2m1", 2, 1, 1, true, false, false, 16, 6.0},
    {"e8m0", 8, 0, 127, false, false, true, 256, 0x1p127},
};

bool is_nan_code(const MiniFormatInfo& fi, uint8_t code) {
  if (!fi.has_nan) return false;
  if (fi.name == "e8m0") return code == 0xFF;
  const uint8_t mag = code & 0x7F;
  if (fi.name == "e4m3") return mag == 0x7F;
  return mag > 0x7C;  // e5m2: exponent all ones, mantissa non-zero
}

double decode_magnitude(const MiniFormatInfo& fi, uint32_t mag) {
  const int m = fi.mantissa_bits;
  const uint32_t exp_field = mag >> m, mant = mag & ((1u << m) - 1);
  if (fi.name == "e8m0") return std::ldexp(1.0, static_cast<int>(mag) - fi.bias);
  if (exp_field == 0) return std::ldexp(static_cast<double>(mant), 1 - fi.bias - m);  // subnormal
  if (fi.has_inf && exp_field == (1u << fi.exponent_bits) - 1) return INFINITY;
  return std::ldexp(static_cast<double>((1u << m) + mant),
                    static_cast<int>(exp_field) - fi.bias - m);
}

// The code of a representable non-negative value (from the rounding below).
uint32_t magnitude_code(const MiniFormatInfo& fi, double v) {
  const int m = fi.mantissa_bits;
  const double min_normal = std::ldexp(1.0, 1 - fi.bias);
  if (v < min_normal) return static_cast<uint32_t>(std::ldexp(v, fi.bias - 1 + m));
  const int e = std::ilogb(v);
  const uint32_t mant = static_cast<uint32_t>(std::ldexp(v, m - e)) - (1u << m);
  return (static_cast<uint32_t>(e + fi.bias) << m) | mant;
}

// The largest finite magnitude code.
uint32_t max_code(const MiniFormatInfo& fi) {
  return magnitude_code(fi, fi.max_finite);
}

struct Tables {
  std::array<std::array<float, 256>, 4> values{};
  Tables() {
    for (int f = 0; f < 4; ++f) {
      const MiniFormatInfo& fi = kInfo[f];
      for (int c = 0; c < fi.codes; ++c) {
        const uint8_t code = static_cast<uint8_t>(c);
        if (is_nan_code(fi, code)) {
          values[f][c] = NAN;
          continue;
        }
        const int sign_bit = fi.exponent_bits + fi.mantissa_bits;
        const bool negative = fi.has_sign && ((c >> sign_bit) & 1);
        const uint32_t mag = fi.has_sign ? (c & ((1u << sign_bit) - 1)) : c;
        const double v = decode_magnitude(fi, mag);
        values[f][c] = static_cast<float>(negative ? -v : v);
      }
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

// Rounds |x| to the format's grid: `up` decides whether the remainder rounds up.
template <typename RoundUp>
uint8_t encode_with(MiniFormat f, float x, RoundUp up) {
  const MiniFormatInfo& fi = info(f);
  const int sign_bit = fi.exponent_bits + fi.mantissa_bits;
  if (f == MiniFormat::e8m0) {
    // A scale: the power of two of x rounded in the exponent (x <= 0 or NaN: the NaN code).
    if (!(x > 0) || std::isnan(x)) return 0xFF;
    const int e = std::ilogb(static_cast<double>(x));
    const double frac = std::ldexp(static_cast<double>(x), -e) - 1.0;  // [0, 1)
    const int rounded = e + (up(frac, e) ? 1 : 0);
    const int code = std::clamp(rounded + fi.bias, 0, 254);
    return static_cast<uint8_t>(code);
  }
  const uint8_t sign = (fi.has_sign && std::signbit(x)) ? static_cast<uint8_t>(1u << sign_bit) : 0;
  // NaN: S.1111.111 (E4M3), S.11111.11 (E5M2); E2M1 has none (callers never pass one).
  if (std::isnan(x)) return static_cast<uint8_t>(sign | (fi.has_nan ? 0x7Fu : max_code(fi)));
  const double a = std::fabs(static_cast<double>(x));
  if (std::isinf(a) && fi.has_inf) return static_cast<uint8_t>(sign | (0x1Fu << fi.mantissa_bits));
  if (a >= fi.max_finite) return static_cast<uint8_t>(sign | max_code(fi));
  // The quantum at a: the spacing of the binade holding a (subnormals share the lowest one).
  const int m = fi.mantissa_bits;
  const int e = std::max(std::ilogb(a == 0 ? 1.0 : a), 1 - fi.bias);
  const double scaled = std::ldexp(a, m - e);  // a in quanta
  const double lower = std::floor(scaled);
  double q = lower + (up(scaled - lower, static_cast<int64_t>(lower)) ? 1.0 : 0.0);
  double v = std::ldexp(q, e - m);
  if (v > fi.max_finite) v = fi.max_finite;  // rounding up past the top saturates
  return static_cast<uint8_t>(sign | magnitude_code(fi, v));
}

}  // namespace

const MiniFormatInfo& info(MiniFormat f) {
  return kInfo[static_cast<int>(f)];
}

MiniFormat parse_mini_format(std::string_view name) {
  for (int f = 0; f < 4; ++f) {
    if (kInfo[f].name == name) return static_cast<MiniFormat>(f);
  }
  throw Error(
      fmt::format("unknown low-precision format '{}' (expected e4m3, e5m2, e2m1 or e8m0)", name));
}

float decode(MiniFormat f, uint8_t code) {
  return tables().values[static_cast<int>(f)][code];
}

uint8_t encode(MiniFormat f, float x) {
  // Ties to even: up when the remainder is above half, or exactly half and the lower is odd.
  return encode_with(f, x, [](double rem, int64_t lower) {
    return rem > 0.5 || (rem == 0.5 && (lower & 1) != 0);
  });
}

namespace {

// Per format: the largest finite code, the smallest normal and 2^(bias - 1 + m), computed once.
struct FastConsts {
  uint32_t top;
  float min_normal, to_quanta;
  double dropped_unit;  // 2^-(23 - m): a dropped mantissa bit pattern in quanta
};
const FastConsts& fast_consts(MiniFormat f) {
  static const std::array<FastConsts, 4> consts = [] {
    std::array<FastConsts, 4> c{};
    for (int i = 0; i < 4; ++i) {
      const MiniFormatInfo& g = info(static_cast<MiniFormat>(i));
      c[i] = {max_code(g), std::ldexp(1.0f, 1 - g.bias),
              std::ldexp(1.0f, g.bias - 1 + g.mantissa_bits),
              std::ldexp(1.0, g.mantissa_bits - 23)};
    }
    return c;
  }();
  return consts[static_cast<int>(f)];
}

// The code of |x| rounded as up(remainder in quanta, truncated code) says, from the float's
// bits: in the subnormal range one exact scaling by a power of two; in the normal range the
// dropped 23 - m mantissa bits are the remainder (a carry of the rounding moves into the
// exponent), and the exponent field is rebiased from 127 to the format's bias.
template <typename RoundUp>
uint8_t fast_code(MiniFormat f, float x, RoundUp up) {
  const MiniFormatInfo& fi = info(f);
  const FastConsts& k = fast_consts(f);
  const int m = fi.mantissa_bits;
  const uint32_t sign = std::signbit(x) ? 1u << (fi.exponent_bits + m) : 0u;
  const float a = std::fabs(x);
  if (a >= static_cast<float>(fi.max_finite)) return static_cast<uint8_t>(sign | k.top);
  uint32_t lower;
  double rem;
  if (a < k.min_normal) {
    const float scaled = a * k.to_quanta;  // exact
    const float whole = std::floor(scaled);
    lower = static_cast<uint32_t>(whole);
    rem = static_cast<double>(scaled - whole);  // exact
  } else {
    uint32_t u;
    std::memcpy(&u, &a, sizeof u);
    const int shift = 23 - m;
    lower = (u >> shift) - (static_cast<uint32_t>(127 - fi.bias) << m);
    rem = static_cast<double>(u & ((1u << shift) - 1u)) * k.dropped_unit;
  }
  const uint32_t code = std::min(lower + (up(rem, lower) ? 1u : 0u), k.top);
  return static_cast<uint8_t>(sign | code);
}

}  // namespace

uint8_t encode_finite_fast(MiniFormat f, float x) {
  return fast_code(f, x, [](double rem, uint32_t lower) {
    return rem > 0.5 || (rem == 0.5 && (lower & 1u) != 0);
  });
}

// fast_code with ties to even, specialised for a row and written without branches so that the
// compiler runs it 8 lanes at a time: the normal range rounds the float's bits to nearest even in
// the integer (add half - 1 plus the kept lowest bit, shift: a carry moves into the exponent, and
// the exponent field is rebiased from 127 to the format's bias); the subnormal range is one exact
// scaling by a power of two and nearbyint (ties to even). Both are computed and one is kept, the
// subnormal one on min(|v|, min normal) so that no conversion can overflow.
void encode_scaled_row(MiniFormat f, const float* x, float divisor, uint8_t* out, int64_t n) {
  const MiniFormatInfo& fi = info(f);
  const FastConsts& k = fast_consts(f);
  const int m = fi.mantissa_bits;
  const int shift = 23 - m;
  const uint32_t sign_bit = 1u << (fi.exponent_bits + m);
  const uint32_t rebias = static_cast<uint32_t>(127 - fi.bias) << m;
  const uint32_t half_less_one = (1u << (shift - 1)) - 1u, top = k.top;
  // |v| is compared by its bits (the same order for non-negative floats), so the loop holds no
  // floating-point compare for the vectoriser to refuse.
  const uint32_t max_finite = std::bit_cast<uint32_t>(static_cast<float>(fi.max_finite));
  const uint32_t min_normal = std::bit_cast<uint32_t>(k.min_normal);
  const float to_quanta = k.to_quanta;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = std::bit_cast<uint32_t>(x[i] / divisor);
    const uint32_t u = bits & 0x7fffffffu;
    const uint32_t normal = ((u + half_less_one + ((u >> shift) & 1u)) >> shift) - rebias;
    const float clamped = std::bit_cast<float>(std::min(u, min_normal));
    const uint32_t subnormal =
        static_cast<uint32_t>(static_cast<int32_t>(std::nearbyint(clamped * to_quanta)));
    const uint32_t is_subnormal = 0u - static_cast<uint32_t>(u < min_normal);  // all ones or 0
    const uint32_t is_saturated = 0u - static_cast<uint32_t>(u >= max_finite);
    const uint32_t code = std::min((subnormal & is_subnormal) | (normal & ~is_subnormal), top);
    out[i] = static_cast<uint8_t>((bits >> 31) * sign_bit | (top & is_saturated) |
                                  (code & ~is_saturated));
  }
}

// encode_stochastic_fast for a row, u_i = (words[i] + 1/2) / 2^32 (Philox::unit). In the normal
// range u < rem = dropped x 2^-shift is compared exactly in integers as
// 2 words[i] + 1 < dropped x 2^(33 - shift); in the subnormal range as doubles, as there.
void encode_stochastic_row(MiniFormat f, const float* x, float divisor, const uint32_t* words,
                           uint8_t* out, int64_t n) {
  const MiniFormatInfo& fi = info(f);
  const FastConsts& k = fast_consts(f);
  const int m = fi.mantissa_bits;
  const int shift = 23 - m;
  const uint32_t sign_bit = 1u << (fi.exponent_bits + m);
  const uint32_t rebias = static_cast<uint32_t>(127 - fi.bias) << m;
  const uint32_t dropped_mask = (1u << shift) - 1u;
  const float max_finite = static_cast<float>(fi.max_finite);
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i] / divisor;
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    const uint32_t u = bits & 0x7fffffffu;
    const float a = std::fabs(v);
    uint32_t lower;
    bool up;
    if (a < k.min_normal) {
      const float scaled = a * k.to_quanta;  // exact
      const float whole = std::floor(scaled);
      lower = static_cast<uint32_t>(whole);
      up = (static_cast<double>(words[i]) + 0.5) * 0x1p-32 < static_cast<double>(scaled - whole);
    } else {
      lower = (u >> shift) - rebias;
      const uint64_t dropped = u & dropped_mask;
      up = 2 * static_cast<uint64_t>(words[i]) + 1 < (dropped << (33 - shift));
    }
    uint32_t code = std::min(lower + (up ? 1u : 0u), k.top);
    if (a >= max_finite) code = k.top;
    out[i] = static_cast<uint8_t>(((bits >> 31) != 0 ? sign_bit : 0u) | code);
  }
}

uint8_t encode_stochastic_fast(MiniFormat f, float x, double u) {
  return fast_code(f, x, [u](double rem, uint32_t) { return u < rem; });
}

uint8_t encode_stochastic(MiniFormat f, float x, double u) {
  return encode_with(f, x, [u](double rem, int64_t) { return u < rem; });
}

}  // namespace trillion
