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

namespace {
// Maps a 32-bit word to the open interval (0, 1).
inline double to_unit(uint32_t w) {
  return (static_cast<double>(w) + 0.5) * 0x1p-32;
}
}  // namespace

double Philox::uniform(uint64_t index) const {
  return to_unit(block(index)[0]);
}

double Philox::normal(uint64_t index) const {
  PhiloxCounter w = block(index);
  double u1 = to_unit(w[0]);
  double u2 = to_unit(w[1]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

uint64_t Philox::below(uint64_t index, uint64_t n) const {
  PhiloxCounter w = block(index);
  uint64_t r = (static_cast<uint64_t>(w[2]) << 32) | w[3];
  return r % n;
}

}  // namespace trillion
