// See checkpoint_dir.h.
#include "cli/checkpoint_dir.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
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

namespace {

// The first of: `recorded` as given (from the current directory), then `recorded` under
// `anchor` and under each directory above it, that `exists` accepts; "" when none (each
// candidate is appended to `tried`). An absolute path is only itself.
std::string find_recorded_path(const std::string& recorded, const std::filesystem::path& anchor,
                               const std::function<bool(const std::string&)>& exists,
                               std::vector<std::string>& tried) {
  std::vector<std::string> candidates = {recorded};
  if (std::filesystem::path(recorded).is_relative()) {
    std::filesystem::path dir = anchor;
    while (true) {
      candidates.push_back((dir / recorded).lexically_normal().string());
      if (!dir.has_relative_path()) break;  // the root
      dir = dir.parent_path();
    }
  }
  for (const std::string& c : candidates) {
    if (std::find(tried.begin(), tried.end(), c) != tried.end()) continue;
    tried.push_back(c);
    if (exists(c)) return c;
  }
  return "";
}

std::string quoted_list(const std::vector<std::string>& paths) {
  std::string list;
  for (const std::string& path : paths) list += (list.empty() ? "'" : ", '") + path + "'";
  return list;
}

}  // namespace

std::string find_run_tokenizer(const RunConfig& cfg, const std::string& dir, std::string& why) {
  namespace fs = std::filesystem;
  if (cfg.data.source != "shards") {
    why = fmt::format("the run trained on data.source = \"{}\", which has no tokenizer",
                      cfg.data.source);
    return "";
  }
  std::error_code ec;
  const auto is_file = [&](const std::string& path) { return fs::is_regular_file(path, ec); };
  fs::path run_dir = fs::absolute(dir, ec).lexically_normal();
  if (run_dir.filename().empty()) run_dir = run_dir.parent_path();  // a trailing '/'
  if (run_dir.parent_path().filename() == "checkpoints")
    run_dir = run_dir.parent_path().parent_path();
  std::vector<std::string> tried;
  const std::string train_bin = data::shard_path(cfg.data.path, data::Split::kTrain);
  const std::string shards = find_recorded_path(train_bin, run_dir, is_file, tried);
  if (shards.empty()) {
    why = fmt::format("the run's data.path '{}' has no train.bin (tried {})", cfg.data.path,
                      quoted_list(tried));
    return "";
  }
  std::optional<std::string> recorded;
  try {
    recorded = data::read_shard_info(shards).tokenizer;
  } catch (const Error& e) {
    why = e.what();
    return "";
  }
  if (!recorded || recorded->empty()) {
    why = fmt::format("the run's shards '{}' record no tokenizer", shards);
    return "";
  }
  tried.clear();
  const std::string found =
      find_recorded_path(*recorded, fs::absolute(shards, ec).parent_path(), is_file, tried);
  if (found.empty()) {
    why = fmt::format(
        "the run's shards '{}' were made with tokenizer '{}', which is not there "
        "(tried {})",
        shards, *recorded, quoted_list(tried));
  }
  return found;
}

}  // namespace trillion::cli
