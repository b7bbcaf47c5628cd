// See output_guard.h.
#include "cli/output_guard.h"

#include <fmt/format.h>

#include <filesystem>

#include "core/error.h"

namespace trillion::cli {

void refuse_to_replace(const std::vector<std::string>& paths, bool overwrite) {
  if (overwrite) return;
  for (const std::string& path : paths) {
    std::error_code ec;
    if (std::filesystem::symlink_status(path, ec).type() != std::filesystem::file_type::not_found &&
        !ec) {
      throw Error(fmt::format("'{}' already exists; pass --overwrite to replace it", path));
    }
  }
}

void require_new_directory(const std::string& dir, const std::string& option) {
  std::error_code ec;
  const auto type = std::filesystem::symlink_status(dir, ec).type();
  if (type == std::filesystem::file_type::not_found) return;
  if (type != std::filesystem::file_type::directory) {
    throw Error(fmt::format("{} '{}' exists and is not a directory; choose a new path", option, dir));
  }
  if (!std::filesystem::is_empty(dir, ec) || ec) {
    throw Error(fmt::format(
        "{} '{}' is not empty (it may hold a run); name a new directory: nothing is added to an "
        "existing one",
        option, dir));
  }
}

}  // namespace trillion::cli
