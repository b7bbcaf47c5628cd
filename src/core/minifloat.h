// Low-precision element formats of the precision recipes (precision/): OCP FP8 E4M3 and E5M2
// (OCP 8-bit Floating Point Specification 1.0), FP4 E2M1 and the E8M0 power-of-two scale (OCP
// Microscaling Formats (MX) Specification 1.0). One code per byte (E2M1 in the low nibble).
//
// Conversion from float rounds to nearest, ties to even, and saturates: a finite value beyond
// the largest finite code becomes that code (the "satfinite" conversion training kernels use),
// as does an infinity in the formats without one (E4M3, E2M1). E5M2 keeps infinities. NaN stays
// NaN in E4M3 (S.1111.111) and E5M2; E2M1 has no NaN and quantisers never pass one (they check
// the block's amax first). Stochastic rounding rounds up with probability equal to the distance
// from the lower neighbour, in units of the quantum, given a uniform u in [0, 1).
//
//            bias  max finite  min normal  min subnormal  inf  NaN
//   E4M3       7        448       2^-6        2^-9         no   S.1111.111
//   E5M2      15      57344       2^-14       2^-16        yes  S.11111.{01,10,11}
//   E2M1       1          6       1           0.5          no   no
//   E8M0     127      2^127       2^-127      -            no   0xFF (unsigned, no mantissa)
#pragma once

#include <cstdint>
#include <string_view>

namespace trillion {

enum class MiniFormat : uint8_t { e4m3, e5m2, e2m1, e8m0 };

struct MiniFormatInfo {
  std::string_view name;
  int exponent_bits, mantissa_bits, bias;
  bool has_sign, has_inf, has_nan;
  int codes;          // 256, or 16 for E2M1
  double max_finite;  // 448, 57344, 6, 2^127
};

const MiniFormatInfo& info(MiniFormat f);
// Parses "e4m3", "e5m2", "e2m1", "e8m0"; throws Error naming the value.
MiniFormat parse_mini_format(std::string_view name);

// The value of a code (exact in float for every format; NaN codes give NaN).
float decode(MiniFormat f, uint8_t code);
// Round to nearest even with saturation.
uint8_t encode(MiniFormat f, float x);
// The same codes as encode for finite x in the element formats (E4M3, E5M2, E2M1), by integer
// rounding of the float's bits (normal range) or one exact scaling and nearbyint (subnormal
// range): what the quantisers run per element. Non-finite x is the caller's to refuse.
uint8_t encode_finite_fast(MiniFormat f, float x);
// out[i] = encode_finite_fast(f, x[i] / divisor) for i < n (the quantisers' inner loop).
void encode_scaled_row(MiniFormat f, const float* x, float divisor, uint8_t* out, int64_t n);
// encode_stochastic's codes the same way.
uint8_t encode_stochastic_fast(MiniFormat f, float x, double u);
// out[i] = encode_stochastic_fast(f, x[i] / divisor, Philox::unit(words[i])) for i < n.
void encode_stochastic_row(MiniFormat f, const float* x, float divisor, const uint32_t* words,
                           uint8_t* out, int64_t n);
// Stochastic rounding; u uniform in [0, 1).
uint8_t encode_stochastic(MiniFormat f, float x, double u);
// encode then decode.
inline float round_to(MiniFormat f, float x) {
  return decode(f, encode(f, x));
}

}  // namespace trillion
