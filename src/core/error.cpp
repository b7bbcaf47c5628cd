// See error.h.
#include "core/error.h"

#include <fmt/format.h>

namespace trillion {

void check_failed(const char* condition, const char* file, int line, const std::string& message) {
  throw Error(
      fmt::format("internal check failed: {} at {}:{}: {}", condition, file, line, message));
}

}  // namespace trillion
