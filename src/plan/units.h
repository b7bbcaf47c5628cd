// Human units for every number the planner prints: counts with K/M/B/T suffixes (12.6M
// parameters, 17.3M GPU-hours), bytes in decimal GB/MB/TB, dollars ($34.5M), durations (43.9
// days, 5.45 s, 820 ms), with three significant digits.
//
// Invariant: decimal prefixes (1 GB = 1e9 bytes, 1M = 1e6), as everywhere in the planner.
#pragma once

#include <string>

namespace trillion::plan {

std::string format_count(double n);    // 950, 12.6K, 12.6M, 405B, 1.99T
std::string format_bytes(double b);    // 512 B, 3.4 MB, 77.1 GB, 32.0 TB
std::string format_usd(double usd);    // $950, $12.6K, $34.5M, $1.2B
std::string format_seconds(double s);  // 820 us, 12.3 ms, 5.45 s, 12.5 min, 3.2 h, 43.9 days
std::string format_flops(double f);    // 3.94e25 (FLOP counts are too large for suffixes)

}  // namespace trillion::plan
