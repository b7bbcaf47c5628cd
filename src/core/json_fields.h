// Typed, checked access to JSON read from files a user can edit or damage (checkpoint manifests
// and state, shard metadata, tokenizer files, metrics). Every accessor either returns a value of
// the asked type and range or throws a trillion::Error naming the origin (a file) and the field,
// what was found and what was expected. Invariant: nothing here lets a JSON library exception or
// assertion escape (nlohmann's operator[] on a const object asserts on a missing key, and get<T>
// throws its own exception type on a type mismatch), so no crafted file reaches either.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace trillion {

// Parses `text`; a syntax error is an Error naming `origin` and the parser's position.
nlohmann::json parse_json(std::string_view text, const std::string& origin);

// `j` itself must be an object (origin names it in the message).
const nlohmann::json& json_object(const nlohmann::json& j, const std::string& origin);

// Field `key` of object `j`: required, else an Error "origin: field 'key' is missing".
const nlohmann::json& json_field(const nlohmann::json& j, std::string_view key,
                                 const std::string& origin);
bool json_has(const nlohmann::json& j, std::string_view key);

// Required fields of a given type. Integers must be JSON integers (1.5 or "1" is an error) in
// [lo, hi]; numbers must be finite unless allow_non_finite (then JSON null, which is how
// nlohmann writes NaN and infinities, reads as NaN).
int64_t json_int(const nlohmann::json& j, std::string_view key, const std::string& origin,
                 int64_t lo = INT64_MIN, int64_t hi = INT64_MAX);
uint64_t json_uint(const nlohmann::json& j, std::string_view key, const std::string& origin);
double json_number(const nlohmann::json& j, std::string_view key, const std::string& origin,
                   bool allow_non_finite = false);
std::string json_string(const nlohmann::json& j, std::string_view key, const std::string& origin);

// The JSON type of a value in words ("a string", "null", "an array", ...).
std::string json_kind(const nlohmann::json& value);

}  // namespace trillion
