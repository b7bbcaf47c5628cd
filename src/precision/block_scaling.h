// Block-scaled quantisation: a [rows, cols] fp32 matrix stored as low-precision codes with one
// scale per tile, the way FP8/FP4 training kernels consume it.
//   kAmax   (DeepSeek-V3 2412.19437 §3.3.1): scale = amax / max_finite in fp32, so the tile's
//           largest magnitude maps to the format's largest finite value (448 for E4M3); tiles
//           of 1x128 for activations, 128x128 for weights.
//   kMx     (OCP MX 1.0 §6.3): scale = 2^(floor(log2 amax) - emax_elem), an E8M0 power of two
//           (emax_elem = 2 for E2M1, whose largest value is 1.5 * 2^2); 1x32 blocks. Elements
//           above the format's range after scaling saturate.
//   kNvfp4  (NVIDIA NVFP4): a per-tensor fp32 scale amax / (448 * 6) and per 1x16 block an E4M3
//           scale amax_block / 6 / tensor_scale, rounded to E4M3.
// An element's value is decode(code) * tile_scale * tensor_scale. A tile of zeros gets scale 1
// (its codes are all zero).
#pragma once

#include <cstdint>
#include <vector>

#include "core/minifloat.h"
#include "core/philox.h"

namespace trillion::precision {

enum class Scaling { kAmax, kMx, kNvfp4 };

struct BlockQuantized {
  MiniFormat format = MiniFormat::e4m3;
  Scaling scaling = Scaling::kAmax;
  int64_t rows = 0, cols = 0, tile_rows = 1, tile_cols = 128;
  std::vector<uint8_t> codes;  // [rows, cols]
  std::vector<float> scales;   // [tile_rows_count, tile_cols_count], the decoded tile scales
  float tensor_scale = 1.0f;   // kNvfp4's second level; 1 otherwise

  int64_t tiles_down() const { return (rows + tile_rows - 1) / tile_rows; }
  int64_t tiles_across() const { return (cols + tile_cols - 1) / tile_cols; }
  float scale(int64_t r, int64_t c) const {
    return scales[(r / tile_rows) * tiles_across() + c / tile_cols];
  }
  float value(int64_t r, int64_t c) const {
    return decode(format, codes[r * cols + c]) * scale(r, c) * tensor_scale;
  }
};

struct QuantizeOptions {
  MiniFormat format = MiniFormat::e4m3;
  Scaling scaling = Scaling::kAmax;
  int64_t tile_rows = 1, tile_cols = 128;
  const Philox* stochastic = nullptr;  // non-null: stochastic rounding, element i uses uniform(i)
};

// x is [rows, cols] row-major with leading dimension ld (>= cols). Throws Error for non-finite
// input (a NaN has no code in every format; the step guards catch it before).
BlockQuantized quantize(const float* x, int64_t rows, int64_t cols, int64_t ld,
                        const QuantizeOptions& options);

// out [rows, cols] = the quantised values.
void dequantize(const BlockQuantized& q, float* out);

}  // namespace trillion::precision
