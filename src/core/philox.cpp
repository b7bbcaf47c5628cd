// See philox.h. Constants from the Philox paper (Salmon et al., "Parallel random numbers: as easy
// as 1, 2, 3", SC'11): multipliers 0xD2511F53, 0xCD9E8D57; Weyl key increments 0x9E3779B9,
// 0xBB67AE85.
#include "core/philox.h"

#include <cmath>
#include <numbers>

namespace trillion {

namespace {
inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}
}  // namespace

PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(0xD2511F53u, c[0], hi0, lo0);
    mulhilo(0xCD9E8D57u, c[2], hi1, lo1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += 0x9E3779B9u;
    k[1] += 0xBB67AE85u;
  }
  return c;
}

uint64_t fnv1a64(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

PhiloxCounter Philox::block(uint64_t index) const {
  PhiloxCounter counter = {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                           static_cast<uint32_t>(stream_), static_cast<uint32_t>(stream_ >> 32)};
  PhiloxKey key = {static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32)};
  return philox4x32_10(counter, key);
}

double Philox::uniform(uint64_t index) const {
  return unit(block(index)[0]);
}

// philox4x32_10 on one counter per lane with plain scalars and no early exit, so the compiler
// runs several lanes per vector register (32x32->64 multiplies); word 0 is block(first + i)[0].
void Philox::first_words(uint64_t first, int64_t n, uint32_t* out) const {
  const uint32_t s0 = static_cast<uint32_t>(stream_), s1 = static_cast<uint32_t>(stream_ >> 32);
  const uint32_t key0 = static_cast<uint32_t>(seed_), key1 = static_cast<uint32_t>(seed_ >> 32);
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t index = first + static_cast<uint64_t>(i);
    uint32_t c0 = static_cast<uint32_t>(index), c1 = static_cast<uint32_t>(index >> 32);
    uint32_t c2 = s0, c3 = s1, k0 = key0, k1 = key1;
    for (int round = 0; round < 10; ++round) {
      const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
      const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
      c1 = static_cast<uint32_t>(p1);
      c3 = static_cast<uint32_t>(p0);
      c0 = n0;
      c2 = n2;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    out[i] = c0;
  }
}

double Philox::normal(uint64_t index) const {
  PhiloxCounter w = block(index);
  double u1 = unit(w[0]);
  double u2 = unit(w[1]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

uint64_t Philox::below(uint64_t index, uint64_t n) const {
  PhiloxCounter w = block(index);
  uint64_t r = (static_cast<uint64_t>(w[2]) << 32) | w[3];
  return r % n;
}

}  // namespace trillion
