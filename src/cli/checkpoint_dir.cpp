// See checkpoint_dir.h.
#include "cli/checkpoint_dir.h"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <optional>

#include "core/error.h"
#include "data/shard.h"
#include "train/checkpoint/checkpoint.h"
#include "train/run_config.h"

namespace trillion::cli {

PinnedCheckpoint resolve_checkpoint_dir(const std::string& argument, const char* command,
                                        int64_t step) {
  std::error_code ec;
  if (!std::filesystem::is_directory(argument, ec)) {
    throw Error(
        fmt::format("--checkpoint '{}' is not a directory; pass a checkpoint directory "
                    "(RUN_DIR/checkpoints/step_N) or a run directory",
                    argument));
  }
  if (std::filesystem::exists(argument + "/manifest.json", ec)) {
    std::optional<PinnedCheckpoint> pin = pin_checkpoint(argument);
    if (!pin) {
      throw Error(fmt::format(
          "checkpoint '{}' was removed (by its run's checkpoint retention?) before it could be "
          "read; pass the run directory to read its newest checkpoint",
          argument));
    }
    if (auto problem = verify_checkpoint(argument))
      throw Error(fmt::format("checkpoint '{}' is corrupt: {}", argument, *problem));
    return std::move(*pin);
  }
  std::optional<PinnedCheckpoint> found =
      pin_newest_checkpoint(argument, step, [&](const std::string& dir, const std::string& why) {
        std::fprintf(stderr, "trillion %s: skipping corrupt checkpoint %s: %s\n", command,
                     dir.c_str(), why.c_str());
      });
  if (!found) {
    throw Error(step >= 0 ? fmt::format("run directory '{}' has no valid checkpoint of step {}",
                                        argument, step)
                          : fmt::format("'{}' is neither a checkpoint nor a run directory with a "
                                        "valid checkpoint",
                                        argument));
  }
  return std::move(*found);
}

std::string run_tokenizer_path(const RunConfig& cfg) {
  if (cfg.data.source != "shards") return "";
  try {
    const auto info = data::read_shard_info(data::shard_path(cfg.data.path, data::Split::kTrain));
    return info.tokenizer.value_or("");
  } catch (const Error&) {
    return "";
  }
}

}  // namespace trillion::cli
