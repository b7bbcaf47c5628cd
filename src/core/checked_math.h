// Overflow-checked integer arithmetic for sizes read from files and command lines. Every size a
// reader takes from untrusted bytes (a shard header, a manifest, a gzip stream) is combined with
// these before it is compared with the file size or used to index memory: a product or sum that
// does not fit is reported as the caller's own error instead of wrapping (signed overflow is
// undefined behaviour; a wrapped size passes a bounds check and reads out of bounds).
#pragma once

#include <cstdint>
#include <optional>

namespace trillion {

// a * b, or nullopt when the product does not fit in int64_t.
inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// a + b, or nullopt when the sum does not fit in int64_t.
inline std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

}  // namespace trillion
