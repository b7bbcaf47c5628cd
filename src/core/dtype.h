// Element types: f32, f64 (reference/gradient checks) and bf16 (storage, round-to-nearest-even).
// Invariant: dtype_size() is the storage size in bytes; every byte count in the system uses it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace trillion {

enum class DType : uint8_t { f32, f64, bf16 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::f64:
      return 8;
    case DType::bf16:
      return 2;
  }
  return 0;
}

std::string_view dtype_name(DType t);
// Parses "f32" / "fp32" / "float32", "f64" / "fp64", "bf16"; throws Error naming the value.
DType parse_dtype(std::string_view name);

// bf16 storage: the top 16 bits of an IEEE float.
struct bf16 {
  uint16_t bits = 0;
};

inline float bf16_to_float(bf16 x) {
  uint32_t u = static_cast<uint32_t>(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest, ties to even; NaN stays a (quiet) NaN, infinities stay infinite.
inline bf16 float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>((u + rounding) >> 16)};
}

// rows x cols floats (row stride ld) to contiguous bf16 [rows, cols], each as float_to_bf16
// rounds it; on all threads, vectorised (the per-GEMM operand conversion of a bf16 recipe).
void floats_to_bf16(const float* x, int64_t rows, int64_t cols, int64_t ld, bf16* out);

// Type -> DType mapping for the typed kernels.
template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::f64;
}
template <>
constexpr DType dtype_of<bf16>() {
  return DType::bf16;
}

}  // namespace trillion
