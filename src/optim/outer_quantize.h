// Quantisation of DiLoCo's outer exchange (Streaming DiLoCo, Douillard et al. 2501.18512 §2.4:
// pseudo-gradients sent in low precision, down to 4 bits, with no loss in their experiments; the
// outer optimizer itself stays fp32). Three precisions:
//   fp32  4 bytes per element (no quantisation);
//   bf16  2 bytes, round to nearest even;
//   fp4   E2M1 codes (values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives; OCP MX v1.0 element
//         format), two per byte, each block of kFp4Block elements scaled by one fp32 factor
//         absmax / 6 so the block's largest magnitude maps to 6: 0.5 + 4/128 = 0.53 bytes each.
// Rounding is to nearest (ties to the even code), deterministic, so every island decodes the
// same values. Error bounds: bf16 |x - q| <= 2^-8 |x| (half an ulp of its 8-bit significand);
// fp4 |x - q| <= absmax(block) / 6 (the widest gap, 4 to 6, halved, times the scale), and
// <= absmax / 24 for |x| <= absmax / 6.
//
// Invariants: zeros and signs survive; a block of zeros has scale 0; packing then unpacking is
// exactly the in-place quantisation.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace trillion {

enum class OuterPrecision { fp32, bf16, fp4 };
// "fp32", "bf16" or "fp4"; Error naming `key` otherwise.
OuterPrecision parse_outer_precision(const std::string& name, const std::string& key);
std::string outer_precision_name(OuterPrecision p);

inline constexpr int kFp4Block = 128;
// Bytes on the wire per element (fp4 includes its scales).
double outer_bytes_per_element(OuterPrecision p);

struct Fp4Packed {
  std::vector<uint8_t> codes;  // element 2i in the low nibble of byte i, 2i+1 in the high one
  std::vector<float> scales;   // one per block of kFp4Block elements
  int64_t elements = 0;
  size_t bytes() const { return codes.size() + scales.size() * sizeof(float); }
};
Fp4Packed pack_fp4(std::span<const float> x);
void unpack_fp4(const Fp4Packed& p, std::span<float> out);

// x <- what the exchange at precision p delivers of x.
void quantize_in_place(OuterPrecision p, std::span<float> x);

}  // namespace trillion
