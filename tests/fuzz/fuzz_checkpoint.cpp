// Fuzz target: checkpoint manifest.json and state.json. The input is MANIFEST '\0' STATE.
// First byte even: both texts go to the parsers directly. Odd: a checkpoint directory is
// written with STATE as its state.json and a manifest that matches every file (fixed up, as a
// crafted checkpoint would be), then verified and read through the public API. Properties: a
// checkpoint that verifies has a state.json that parses, and its weights read back intact.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/error.h"
#include "fuzz_target.h"
#include "train/checkpoint/checkpoint.h"

namespace {

void write(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A scratch directory (tmpfs when there is one: five small files are written per input),
// removed at exit.
struct Scratch {
  std::string dir;
  Scratch() {
    std::string name = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    name += "/trillion_fuzz_checkpoint_XXXXXX";
    const char* made = ::mkdtemp(name.data());
    trillion::fuzz::fuzz_require(made != nullptr, "mkdtemp");
    dir = made;
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

const std::string& scratch_dir() {
  static const Scratch scratch;
  return scratch.dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trillion;
  if (size == 0) return 0;
  const std::string_view input = fuzz::as_text(data + 1, size - 1);
  const size_t cut = input.find('\0');
  const std::string_view manifest = input.substr(0, cut);
  const std::string_view state = cut == std::string_view::npos ? "" : input.substr(cut + 1);
  if ((data[0] & 1) == 0) {
    try {
      (void)parse_checkpoint_manifest(manifest, "manifest.json");
    } catch (const Error&) {
    }
    try {
      (void)parse_checkpoint_state(state, "state.json");
    } catch (const Error&) {
    }
    return 0;
  }
  const std::string& dir = scratch_dir();
  const std::string params(16, '\x01'), optimizer(32, '\x02'), config = "[model]\n";
  nlohmann::json m;
  auto put = [&](const char* name, std::string_view bytes) {
    write(dir + "/" + name, bytes);
    m[name] = {{"bytes", bytes.size()}, {"xxh64", XXH64(bytes.data(), bytes.size(), 0)}};
  };
  put("params.bin", params);
  put("optimizer.bin", optimizer);
  put("state.json", state);
  put("config.toml", config);
  write(dir + "/manifest.json", m.dump());
  const auto problem = verify_checkpoint(dir);
  bool state_ok = true;
  try {
    (void)parse_checkpoint_state(state, "state.json");
  } catch (const Error&) {
    state_ok = false;
  }
  fuzz::fuzz_require(problem.has_value() != state_ok, "verify agrees with the state parser");
  if (!problem) {
    fuzz::fuzz_require(read_checkpoint_weights(dir).bytes == params, "weights read back");
    fuzz::fuzz_require(read_checkpoint_config(dir) == config, "config read back");
  }
  return 0;
}
