// Fuzz target: the run-config parser (TOML text -> validated RunConfig). Property: an accepted
// config's resolved TOML parses again to the same resolved TOML (what --resume relies on).
#include <string>

#include "core/error.h"
#include "fuzz_target.h"
#include "train/run_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trillion;
  const std::string text(fuzz::as_text(data, size));
  RunConfig config;
  try {
    config = parse_run_config(text, "fuzz.toml", {});
  } catch (const Error&) {
    return 0;
  }
  const std::string resolved = to_toml(config);
  try {
    const RunConfig again = parse_run_config(resolved, "resolved.toml", {});
    fuzz::fuzz_require(to_toml(again) == resolved, "resolved TOML round-trips");
  } catch (const Error& e) {
    std::fprintf(stderr, "resolved config rejected: %s\n", e.what());
    fuzz::fuzz_require(false, "a resolved config parses");
  }
  return 0;
}
