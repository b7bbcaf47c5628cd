// Outputs a command writes are never silently written over: `export --out RUN/metrics.jsonl` once
// replaced a run's metrics with a GGUF file. Each command names what it would write; an existing
// one is refused (before anything is read or computed) unless the user passed --overwrite.
#pragma once

#include <string>
#include <vector>

namespace trillion::cli {

// Throws Error "'PATH' already exists; pass --overwrite to replace it" for the first of `paths`
// that exists (any kind of file), unless `overwrite`.
void refuse_to_replace(const std::vector<std::string>& paths, bool overwrite);

// Throws Error when `dir` exists and is not an empty directory: commands that create a run
// directory never add to (or mix with) an existing one.
void require_new_directory(const std::string& dir, const std::string& option);

}  // namespace trillion::cli
