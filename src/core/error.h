// Errors: trillion::Error for anything a user can cause (bad config, data, checkpoint, launch),
// with a message that names the value and the fix; TRILLION_CHECK for internal invariants.
// Never assert() on user input; never abort silently.
#pragma once

#include <stdexcept>
#include <string>

namespace trillion {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws Error("internal check failed: <cond> at <file>:<line>: <msg>").
[[noreturn]] void check_failed(const char* condition, const char* file, int line,
                               const std::string& message);

}  // namespace trillion

#define TRILLION_CHECK(cond, msg)                                            \
  do {                                                                       \
    if (!(cond)) ::trillion::check_failed(#cond, __FILE__, __LINE__, (msg)); \
  } while (0)
