// See json_fields.h. Values are inspected with is_*() before any get<T>(), so the library never
// throws or asserts on the caller's behalf.
#include "core/json_fields.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "core/error.h"

namespace trillion {

namespace {
[[noreturn]] void mistyped(const std::string& origin, std::string_view key,
                           const nlohmann::json& value, const char* expected) {
  throw Error(
      fmt::format("{}: field '{}' is {}, expected {}", origin, key, json_kind(value), expected));
}
}  // namespace

std::string json_kind(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::object:
      return "an object";
    case nlohmann::json::value_t::array:
      return "an array";
    case nlohmann::json::value_t::string:
      return "a string";
    case nlohmann::json::value_t::boolean:
      return "a boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return fmt::format("the integer {}", value.dump());
    case nlohmann::json::value_t::number_float:
      return fmt::format("the number {}", value.dump());
    default:
      return "binary data";
  }
}

nlohmann::json parse_json(std::string_view text, const std::string& origin) {
  // Parsing without exceptions: a discarded value marks a syntax error; the second parse (only
  // on failure) recovers the parser's message with the byte position.
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_discarded()) return j;
  std::string detail = "syntax error";
  try {
    [[maybe_unused]] const nlohmann::json again = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    detail = e.what();
  }
  throw Error(fmt::format("{}: not valid JSON ({})", origin, detail));
}

const nlohmann::json& json_object(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object()) {
    throw Error(fmt::format("{}: expected a JSON object, found {}", origin, json_kind(j)));
  }
  return j;
}

bool json_has(const nlohmann::json& j, std::string_view key) {
  return j.is_object() && j.find(key) != j.end();
}

const nlohmann::json& json_field(const nlohmann::json& j, std::string_view key,
                                 const std::string& origin) {
  json_object(j, origin);
  const auto it = j.find(key);
  if (it == j.end()) throw Error(fmt::format("{}: field '{}' is missing", origin, key));
  return *it;
}

int64_t json_int(const nlohmann::json& j, std::string_view key, const std::string& origin,
                 int64_t lo, int64_t hi) {
  const nlohmann::json& v = json_field(j, key, origin);
  int64_t value = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw Error(
          fmt::format("{}: field '{}' = {} is out of range [{}, {}]", origin, key, u, lo, hi));
    }
    value = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    value = v.get<int64_t>();
  } else {
    mistyped(origin, key, v, "an integer");
  }
  if (value < lo || value > hi) {
    throw Error(
        fmt::format("{}: field '{}' = {} is out of range [{}, {}]", origin, key, value, lo, hi));
  }
  return value;
}

uint64_t json_uint(const nlohmann::json& j, std::string_view key, const std::string& origin) {
  const nlohmann::json& v = json_field(j, key, origin);
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) {
    const int64_t s = v.get<int64_t>();
    if (s >= 0) return static_cast<uint64_t>(s);
    throw Error(fmt::format("{}: field '{}' = {} must be >= 0", origin, key, s));
  }
  mistyped(origin, key, v, "a non-negative integer");
}

double json_number(const nlohmann::json& j, std::string_view key, const std::string& origin,
                   bool allow_non_finite) {
  const nlohmann::json& v = json_field(j, key, origin);
  if (v.is_null() && allow_non_finite) return std::numeric_limits<double>::quiet_NaN();
  if (!v.is_number()) mistyped(origin, key, v, allow_non_finite ? "a number or null" : "a number");
  const double d = v.get<double>();
  if (!allow_non_finite && !std::isfinite(d)) mistyped(origin, key, v, "a finite number");
  return d;
}

std::string json_string(const nlohmann::json& j, std::string_view key, const std::string& origin) {
  const nlohmann::json& v = json_field(j, key, origin);
  if (!v.is_string()) mistyped(origin, key, v, "a string");
  return v.get<std::string>();
}

}  // namespace trillion
