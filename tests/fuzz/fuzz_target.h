// Shared by the fuzz targets: each target file defines LLVMFuzzerTestOneInput. Built with clang
// and -fsanitize=fuzzer (TRILLION_FUZZ=ON) it is a libFuzzer binary; built with the normal
// toolchain it is linked with replay_main.cpp and replays the checked-in corpus as a CTest test.
// A target returns normally for every input: a trillion::Error is the expected answer to bad
// bytes; anything else (another exception, a crash, a sanitizer report, a failed property check
// via fuzz_require) is a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace trillion::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A property every accepted input must have; abort() makes libFuzzer save the input.
inline void fuzz_require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz property violated: %s\n", what);
    std::abort();
  }
}

}  // namespace trillion::fuzz
