// The typed key reader every [section] reader of a run config uses, and the value checks they
// share (run_config_sections.cpp, run_config_model_section.cpp). Brings toml++: included only by
// those files. Invariant: a reader marks each key it reads as known; reject_unknown() names the
// rest with the list of known keys.
#pragma once

#include <fmt/format.h>
#include <toml++/toml.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <string>

#include "core/error.h"
#include "train/run_config.h"

namespace trillion::config_reading {

// Reads typed keys of one [section], remembering which were used so leftovers are reported.
class SectionReader {
 public:
  SectionReader(const toml::table* table, std::string section, std::string source)
      : table_(table), section_(std::move(section)), source_(std::move(source)) {}

  // Whether the key was given.
  template <typename T>
  bool read(const char* key, T& out) {
    used_.insert(key);
    if (table_ == nullptr) return false;
    const toml::node* node = table_->get(key);
    if (node == nullptr) return false;
    if constexpr (std::is_same_v<T, bool>) {
      if (auto v = node->value<bool>()) return out = *v, true;
    } else if constexpr (std::is_integral_v<T>) {
      // Only an integer node: value<int64_t>() would convert a float such as 2e44 (undefined
      // behaviour out of range; found by fuzz_run_config).
      if (node->is_integer()) return out = static_cast<T>(*node->value<int64_t>()), true;
    } else if constexpr (std::is_floating_point_v<T>) {
      if (auto v = node->value<double>()) return out = *v, true;
    } else {
      if (auto v = node->value<std::string>()) return out = *v, true;
    }
    throw Error(fmt::format("{}: {}.{} has the wrong type (expected {})", source_, section_, key,
                            type_name<T>()));
  }

  // A key whose value is not a scalar (an array of tables): marks it known, returns its node.
  const toml::node* node(const char* key) {
    used_.insert(key);
    return table_ == nullptr ? nullptr : table_->get(key);
  }

  void reject_unknown() const {
    if (table_ == nullptr) return;
    for (const auto& [key, node] : *table_) {
      if (!used_.count(std::string(key.str()))) {
        throw Error(fmt::format("{}: unknown key '{}.{}' (known keys: {})", source_, section_,
                                key.str(), known()));
      }
    }
  }

 private:
  template <typename T>
  static const char* type_name() {
    if constexpr (std::is_same_v<T, bool>) return "true or false";
    if constexpr (std::is_integral_v<T>) return "an integer";
    if constexpr (std::is_floating_point_v<T>) return "a number";
    return "a string";
  }
  std::string known() const {
    std::string s;
    for (const auto& k : used_) s += (s.empty() ? "" : ", ") + k;
    return s;
  }
  const toml::table* table_;
  std::string section_, source_;
  std::set<std::string> used_;
};

inline SectionReader section(const toml::table& root, const char* name, const std::string& source) {
  return SectionReader(root[name].as_table(), name, source);
}

// A config number that is NaN or infinite can only make the run NaN: refused by name.
inline void finite(const std::string& source, const char* key, double value) {
  if (!std::isfinite(value)) {
    throw Error(fmt::format("{}: {} = {} is not a finite number", source, key, value));
  }
}

inline void at_least(const std::string& source, const char* key, int64_t v, int64_t lo) {
  if (v < lo) throw Error(fmt::format("{}: {} = {} must be >= {}", source, key, v, lo));
}

inline void at_most(const std::string& source, const char* key, int64_t v, int64_t hi) {
  if (v > hi) throw Error(fmt::format("{}: {} = {} must be <= {}", source, key, v, hi));
}

// Runs `check`, naming `source` (and `prefix`) before the Error of a function shared with code
// that does not know the file.
template <typename F>
void naming_source(const std::string& source, const char* prefix, F check) {
  try {
    check();
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}{}", source, prefix, e.what()));
  }
}

// [model]: its keys, the attention kind and kernel, and the numerics ModelConfig::validate() lets
// through (run_config_model_section.cpp).
void read_model_section(const toml::table& root, const std::string& source, ModelConfig& mc);

}  // namespace trillion::config_reading
