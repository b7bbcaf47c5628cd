// See dtype.h.
#include "core/dtype.h"

#include <fmt/format.h>

#include <bit>

#include "core/error.h"

namespace trillion {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::bf16:
      return "bf16";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  if (name == "f32" || name == "fp32" || name == "float32") return DType::f32;
  if (name == "f64" || name == "fp64" || name == "float64") return DType::f64;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  throw Error(fmt::format("unknown dtype '{}': expected one of f32, f64, bf16", name));
}

namespace {
// float_to_bf16 without branches, so a loop of it vectorises.
inline uint16_t bf16_bits(uint32_t u) {
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x0040u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}
}  // namespace

void floats_to_bf16(const float* x, int64_t rows, int64_t cols, int64_t ld, bf16* out) {
  static_assert(sizeof(bf16) == 2);
  // Below ~64K elements a thread team costs more than it saves.
  [[maybe_unused]] const bool team = rows * cols >= (int64_t{1} << 16);  // unused without OpenMP
  if (ld == cols) {  // contiguous: one flat loop, split evenly however few the rows
    const int64_t n = rows * cols;
#pragma omp parallel for simd schedule(static) if (team)
    for (int64_t i = 0; i < n; ++i) out[i] = bf16{bf16_bits(std::bit_cast<uint32_t>(x[i]))};
    return;
  }
#pragma omp parallel for schedule(static) if (team)
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * ld;
    bf16* o = out + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) o[c] = bf16{bf16_bits(std::bit_cast<uint32_t>(in[c]))};
  }
}

}  // namespace trillion
