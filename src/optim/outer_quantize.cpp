// See outer_quantize.h.
#include "optim/outer_quantize.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"

namespace trillion {

namespace {

constexpr float kFp4Values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

// Index of the E2M1 magnitude nearest to y >= 0 (y already divided by the scale, <= 6); a tie
// goes to the even index (the even mantissa).
uint8_t fp4_index(float y) {
  uint8_t i = 0;
  while (i < 7) {
    const float mid = 0.5f * (kFp4Values[i] + kFp4Values[i + 1]);
    if (y > mid || (y == mid && i % 2 == 1)) {
      ++i;
    } else {
      break;
    }
  }
  return i;
}

}  // namespace

OuterPrecision parse_outer_precision(const std::string& name, const std::string& key) {
  if (name == "fp32") return OuterPrecision::fp32;
  if (name == "bf16") return OuterPrecision::bf16;
  if (name == "fp4") return OuterPrecision::fp4;
  throw Error(fmt::format("{} = \"{}\" is unknown; use \"fp32\", \"bf16\" or \"fp4\"", key, name));
}

std::string outer_precision_name(OuterPrecision p) {
  switch (p) {
    case OuterPrecision::fp32:
      return "fp32";
    case OuterPrecision::bf16:
      return "bf16";
    case OuterPrecision::fp4:
      return "fp4";
  }
  return "?";
}

double outer_bytes_per_element(OuterPrecision p) {
  switch (p) {
    case OuterPrecision::fp32:
      return 4;
    case OuterPrecision::bf16:
      return 2;
    case OuterPrecision::fp4:
      return 0.5 + 4.0 / kFp4Block;
  }
  return 4;
}

Fp4Packed pack_fp4(std::span<const float> x) {
  Fp4Packed p;
  p.elements = static_cast<int64_t>(x.size());
  p.codes.assign((x.size() + 1) / 2, 0);
  for (size_t b = 0; b < x.size(); b += kFp4Block) {
    const size_t end = std::min(x.size(), b + kFp4Block);
    float absmax = 0;
    for (size_t i = b; i < end; ++i) absmax = std::max(absmax, std::fabs(x[i]));
    const float scale = absmax / 6.0f;
    p.scales.push_back(scale);
    for (size_t i = b; i < end; ++i) {
      const uint8_t magnitude = scale > 0 ? fp4_index(std::min(6.0f, std::fabs(x[i]) / scale)) : 0;
      const uint8_t code = static_cast<uint8_t>(magnitude | (std::signbit(x[i]) ? 8 : 0));
      p.codes[i / 2] |= static_cast<uint8_t>(i % 2 ? code << 4 : code);
    }
  }
  return p;
}

void unpack_fp4(const Fp4Packed& p, std::span<float> out) {
  TRILLION_CHECK(static_cast<int64_t>(out.size()) == p.elements, "fp4 unpack: size differs");
  for (size_t i = 0; i < out.size(); ++i) {
    const uint8_t code = i % 2 ? p.codes[i / 2] >> 4 : p.codes[i / 2] & 0xF;
    const float v = kFp4Values[code & 7] * p.scales[i / kFp4Block];
    out[i] = code & 8 ? -v : v;
  }
}

void quantize_in_place(OuterPrecision p, std::span<float> x) {
  switch (p) {
    case OuterPrecision::fp32:
      return;
    case OuterPrecision::bf16:
      for (float& v : x) v = bf16_to_float(float_to_bf16(v));
      return;
    case OuterPrecision::fp4:
      unpack_fp4(pack_fp4(x), x);
      return;
  }
}

}  // namespace trillion
