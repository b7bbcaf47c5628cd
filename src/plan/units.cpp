// See units.h.
#include "plan/units.h"

#include <fmt/format.h>

#include <cmath>

namespace trillion::plan {
namespace {

// Three significant digits: 1.23, 12.3, 123.
std::string sig3(double v) {
  const double a = std::fabs(v);
  if (a >= 100) return fmt::format("{:.0f}", v);
  if (a >= 10) return fmt::format("{:.1f}", v);
  return fmt::format("{:.2f}", v);
}

std::string scaled(double v, const char* const* suffixes, int n, double step) {
  if (!std::isfinite(v)) return v > 0 ? "inf" : "nan";
  int i = 0;
  while (i + 1 < n && std::fabs(v) >= step * 0.9995) {
    v /= step;
    ++i;
  }
  return fmt::format("{}{}", sig3(v), suffixes[i]);
}

}  // namespace

std::string format_count(double n) {
  // Whole counts print whole; fractional ones (0.04 GPU-hours) keep their significant digits.
  if (std::fabs(n) < 1000 && n == std::floor(n)) return fmt::format("{:.0f}", n);
  if (std::fabs(n) < 1) return fmt::format("{:.2g}", n);
  if (std::fabs(n) < 1000) return sig3(n);
  static const char* kSuffix[] = {"", "K", "M", "B", "T", "P"};
  return scaled(n, kSuffix, 6, 1000);
}

std::string format_bytes(double b) {
  if (std::fabs(b) < 1000) return fmt::format("{:.0f} B", b);
  static const char* kSuffix[] = {" B", " KB", " MB", " GB", " TB", " PB"};
  return scaled(b, kSuffix, 6, 1000);
}

std::string format_usd(double usd) {
  if (std::fabs(usd) < 1000) return fmt::format("${:.2f}", usd);
  return fmt::format("${}", format_count(usd));
}

std::string format_seconds(double s) {
  if (!std::isfinite(s)) return "inf";
  if (s < 1e-3) return sig3(s * 1e6) + " us";
  if (s < 1) return sig3(s * 1e3) + " ms";
  if (s < 120) return sig3(s) + " s";
  if (s < 7200) return sig3(s / 60) + " min";
  if (s < 2 * 86400) return sig3(s / 3600) + " h";
  return sig3(s / 86400) + " days";
}

std::string format_flops(double f) {
  if (!(f > 0) || !std::isfinite(f)) return fmt::format("{:g}", f);
  const int exponent = static_cast<int>(std::floor(std::log10(f)));
  return fmt::format("{:.2f}e{}", f / std::pow(10.0, exponent), exponent);
}

}  // namespace trillion::plan
