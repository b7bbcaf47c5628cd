// Checked JSON field access (core/json_fields.h) and overflow-checked size arithmetic: every
// missing, mistyped or out-of-range field is a trillion::Error naming the origin and the field,
// never a JSON library exception; sums and products that do not fit are reported, not wrapped.
#include "core/json_fields.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/checked_math.h"
#include "core/error.h"

using namespace trillion;

namespace {
// The Error message of f(), or "" when it does not throw a trillion::Error.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(JsonFields, ReadsTypedFieldsAndNamesEveryProblem) {
  const nlohmann::json j = parse_json(
      R"({"n": 7, "big": 18446744073709551615, "neg": -3, "x": 1.5, "s": "hi", "nul": null})",
      "f.json");
  EXPECT_EQ(json_int(j, "n", "f.json"), 7);
  EXPECT_EQ(json_int(j, "neg", "f.json"), -3);
  EXPECT_EQ(json_uint(j, "big", "f.json"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(json_number(j, "x", "f.json"), 1.5);
  EXPECT_EQ(json_number(j, "n", "f.json"), 7.0);
  EXPECT_EQ(json_string(j, "s", "f.json"), "hi");
  EXPECT_TRUE(std::isnan(json_number(j, "nul", "f.json", /*allow_non_finite=*/true)));

  EXPECT_EQ(error_of([&] { json_int(j, "missing", "f.json"); }),
            "f.json: field 'missing' is missing");
  EXPECT_EQ(error_of([&] { json_int(j, "s", "f.json"); }),
            "f.json: field 's' is a string, expected an integer");
  EXPECT_EQ(error_of([&] { json_int(j, "x", "f.json"); }),
            "f.json: field 'x' is the number 1.5, expected an integer");
  EXPECT_EQ(error_of([&] { json_int(j, "big", "f.json"); }),
            "f.json: field 'big' = 18446744073709551615 is out of range [-9223372036854775808, "
            "9223372036854775807]");
  EXPECT_EQ(error_of([&] { json_int(j, "neg", "f.json", 0, 10); }),
            "f.json: field 'neg' = -3 is out of range [0, 10]");
  EXPECT_EQ(error_of([&] { json_uint(j, "neg", "f.json"); }),
            "f.json: field 'neg' = -3 must be >= 0");
  EXPECT_EQ(error_of([&] { json_number(j, "nul", "f.json"); }),
            "f.json: field 'nul' is null, expected a number");
  EXPECT_EQ(error_of([&] { json_string(j, "n", "f.json"); }),
            "f.json: field 'n' is the integer 7, expected a string");
  const nlohmann::json array = parse_json("[1, 2]", "a.json");
  EXPECT_EQ(error_of([&] { json_int(array, "n", "a.json"); }),
            "a.json: expected a JSON object, found an array");
  EXPECT_FALSE(json_has(array, "n"));
}

TEST(JsonFields, SyntaxErrorsNameTheOrigin) {
  const std::string m = error_of([] { parse_json("{\"a\": ", "broken.json"); });
  EXPECT_EQ(m.rfind("broken.json: not valid JSON (", 0), 0u) << m;
  EXPECT_NE(m.find("unexpected end of input"), std::string::npos) << m;
}

TEST(CheckedMath, ReportsOverflowInsteadOfWrapping) {
  EXPECT_EQ(checked_mul(int64_t{1} << 31, int64_t{1} << 31), int64_t{1} << 62);
  EXPECT_EQ(checked_mul(int64_t{1} << 62, 2), std::nullopt);
  EXPECT_EQ(checked_mul(-(int64_t{1} << 62), 2), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(checked_add(std::numeric_limits<int64_t>::max(), 1), std::nullopt);
  EXPECT_EQ(checked_add(std::numeric_limits<int64_t>::max() - 64, 64),
            std::numeric_limits<int64_t>::max());
}
