// Fuzz target: the run-config parser (TOML text -> validated RunConfig), and --set overrides
// (each line "#set section.key=value" of the input is also applied as one). Property: an
// accepted config's resolved TOML parses again to the same resolved TOML (what --resume relies
// on), and its variants one key at a time (what the planner's run-config reader reads) are each
// read or refused with an Error.
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz_target.h"
#include "train/run_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trillion;
  const std::string text(fuzz::as_text(data, size));
  // A line "#set section.key=value" (a comment to TOML) is also applied as a --set override.
  std::vector<std::string> overrides;
  for (size_t at = text.find("#set "); at != std::string::npos; at = text.find("#set ", at + 1)) {
    const size_t end = text.find('\n', at);
    overrides.push_back(text.substr(at + 5, end == std::string::npos ? end : end - at - 5));
  }
  RunConfig config;
  try {
    config = parse_run_config(text, "fuzz.toml", overrides);
  } catch (const Error&) {
    return 0;
  }
  for (const std::string& key : run_config_keys(text, "fuzz.toml").keys)
    run_config_variants(text, "fuzz.toml", key);
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
