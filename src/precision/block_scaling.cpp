// See block_scaling.h.
#include "precision/block_scaling.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace trillion::precision {

namespace {

// The tile scale and the multiplier elements are divided by, per scaling kind.
float tile_scale(const QuantizeOptions& o, float amax, float tensor_scale) {
  if (amax == 0) return 1.0f;
  const MiniFormatInfo& fi = info(o.format);
  switch (o.scaling) {
    case Scaling::kAmax:
      return amax / static_cast<float>(fi.max_finite);
    case Scaling::kMx: {
      // emax_elem: the exponent of the format's largest normal value.
      const int emax = std::ilogb(fi.max_finite);
      return std::ldexp(1.0f, std::ilogb(amax) - emax);
    }
    case Scaling::kNvfp4: {
      const float s =
          decode(MiniFormat::e4m3,
                 encode_finite_fast(MiniFormat::e4m3,
                                    amax / static_cast<float>(fi.max_finite) / tensor_scale));
      return s;  // may be 0 when the block is tiny next to the tensor's amax
    }
  }
  return 1.0f;
}

}  // namespace

BlockQuantized quantize(const float* x, int64_t rows, int64_t cols, int64_t ld,
                        const QuantizeOptions& o) {
  TRILLION_CHECK(rows >= 0 && cols >= 0 && ld >= cols && o.tile_rows > 0 && o.tile_cols > 0,
                 "quantize: bad shape");
  BlockQuantized q;
  q.format = o.format;
  q.scaling = o.scaling;
  q.rows = rows, q.cols = cols, q.tile_rows = o.tile_rows, q.tile_cols = o.tile_cols;
  q.codes.assign(rows * cols, 0);
  q.scales.assign(q.tiles_down() * q.tiles_across(), 1.0f);
  float tensor_amax = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float v = x[r * ld + c];
      if (!std::isfinite(v)) {
        throw Error(fmt::format("cannot quantise a non-finite value ({}) at [{}, {}] to {}", v, r,
                                c, info(o.format).name));
      }
      tensor_amax = std::max(tensor_amax, std::fabs(v));
    }
  }
  if (o.scaling == Scaling::kNvfp4 && tensor_amax > 0) {
    q.tensor_scale = tensor_amax / static_cast<float>(info(MiniFormat::e4m3).max_finite *
                                                      info(o.format).max_finite);
  }
  std::vector<uint32_t> words;  // stochastic rounding's Philox words for one row of a tile
  for (int64_t tr = 0; tr < q.tiles_down(); ++tr) {
    for (int64_t tc = 0; tc < q.tiles_across(); ++tc) {
      const int64_t r0 = tr * o.tile_rows, r1 = std::min(rows, r0 + o.tile_rows);
      const int64_t c0 = tc * o.tile_cols, c1 = std::min(cols, c0 + o.tile_cols);
      float amax = 0;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[r * ld + c]));
      }
      float s = tile_scale(o, amax, q.tensor_scale);
      if (s == 0) s = 1.0f, amax = 0;  // NVFP4: a block below E4M3's range is stored as zeros
      q.scales[tr * q.tiles_across() + tc] = s;
      const float divisor = s * q.tensor_scale;
      if (amax == 0) continue;  // codes stay 0 (+0)
      for (int64_t r = r0; r < r1; ++r) {
        const float* in = x + r * ld + c0;
        uint8_t* codes = q.codes.data() + r * cols + c0;
        if (!o.stochastic) {
          encode_scaled_row(o.format, in, divisor, codes, c1 - c0);
          continue;
        }
        words.resize(static_cast<size_t>(c1 - c0));
        o.stochastic->first_words(static_cast<uint64_t>(r * cols + c0), c1 - c0, words.data());
        encode_stochastic_row(o.format, in, divisor, words.data(), codes, c1 - c0);
      }
    }
  }
  return q;
}

void dequantize(const BlockQuantized& q, float* out) {
  for (int64_t r = 0; r < q.rows; ++r) {
    for (int64_t c = 0; c < q.cols; ++c) out[r * q.cols + c] = q.value(r, c);
  }
}

}  // namespace trillion::precision
