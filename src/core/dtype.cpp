// See dtype.h.
#include "core/dtype.h"

#include <fmt/format.h>

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

}  // namespace trillion
