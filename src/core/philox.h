// Philox-4x32-10 counter-based random numbers (Salmon et al., SC'11). A value is a pure function
// of (key, counter), so a tensor's initial values depend only on (seed, tensor name, element
// index) and never on which process computes them: init is the same under every parallel layout.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace trillion {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// The raw block cipher: 10 rounds of Philox-4x32.
PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key);

// 64-bit FNV-1a of a string; turns a tensor name (or any purpose label) into a stream id.
uint64_t fnv1a64(std::string_view text);

// A stream of random numbers: element i of stream `stream` under `seed` is fixed forever.
class Philox {
 public:
  Philox(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}
  Philox(uint64_t seed, std::string_view purpose) : Philox(seed, fnv1a64(purpose)) {}

  // Four 32-bit words for block `index`.
  PhiloxCounter block(uint64_t index) const;
  // Uniform in (0, 1), from the first word of block `index`: unit(block(index)[0]).
  double uniform(uint64_t index) const;
  // out[i] = block(first + i)[0] for i < n: the words of uniform(first + i), computed many at a
  // time (the loop vectorises; stochastic rounding draws one per element).
  void first_words(uint64_t first, int64_t n, uint32_t* out) const;
  // The uniform in (0, 1) of a word: (w + 1/2) / 2^32, exact in double.
  static double unit(uint32_t w) { return (static_cast<double>(w) + 0.5) * 0x1p-32; }
  // Standard normal via Box-Muller on the first two words of block `index`.
  double normal(uint64_t index) const;
  // Uniform integer in [0, n) (n > 0), from 64 bits of block `index` (bias < 2^-32 for n < 2^32).
  uint64_t below(uint64_t index, uint64_t n) const;

 private:
  uint64_t seed_;
  uint64_t stream_;
};

}  // namespace trillion
