// Command-line parsing shared by the subcommands: CLI11 prints the usage problem (or --help);
// a usage error exits 2 like every other user error, --help exits 0. The numeric validators here
// exist because CLI11's Range/PositiveNumber compare with < and >, which NaN passes: every number
// a command takes goes through one of them, so "nan" and "inf" are refused where they mean
// nothing.
#pragma once

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace trillion::cli {

// Returns -1 when the command should run, else the exit code to return.
inline int parse_arguments(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return -1;
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
}

inline std::string format_bound(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

// A finite number in [lo, hi] (either bound may be infinite: at_least / at_most).
inline CLI::Validator finite_range(double lo, double hi) {
  const std::string bounds = "[" + format_bound(lo) + ", " + format_bound(hi) + "]";
  return CLI::Validator(
      [lo, hi, bounds](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size()) return text + " is not a number";
        if (!std::isfinite(v)) return text + " is not a finite number";
        if (v < lo || v > hi) return text + " is not in " + bounds;
        return std::string();
      },
      "FINITE in " + bounds);
}
inline CLI::Validator finite_at_least(double lo) {
  return finite_range(lo, INFINITY);
}
// A finite number > 0 (a duration, a rate, a size).
inline CLI::Validator finite_positive() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size()) return text + " is not a number";
        if (!std::isfinite(v) || !(v > 0)) return text + " must be a finite number > 0";
        return std::string();
      },
      "FINITE > 0");
}

// A whole number >= lo, said in words (CLI11's NonNegativeNumber printed DBL_MAX's 309 digits).
inline CLI::Validator whole_at_least(long long lo) {
  return CLI::Validator(
      [lo](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE || v < lo) {
          return text + " is not a whole number >= " + std::to_string(lo);
        }
        return std::string();
      },
      "INT >= " + std::to_string(lo));
}

}  // namespace trillion::cli
