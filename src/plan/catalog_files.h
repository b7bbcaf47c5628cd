// The planner's catalog as files: every configs/models/*.toml, configs/clusters/*.toml and
// configs/plans/*.toml of the source tree, compiled into the binary at build time
// (cmake/embed_catalog.cmake), so `--model llama3-405b` and `--cluster h100` read exactly the files
// a user can copy and edit.
//
// Invariant: paths are relative to configs/ ("models/llama3-405b.toml"), sorted by path.
#pragma once

#include <string_view>
#include <vector>

namespace trillion::plan {

struct CatalogFile {
  std::string_view path;  // e.g. "clusters/h100.toml"
  std::string_view text;  // the file's contents
};

const std::vector<CatalogFile>& catalog_files();

}  // namespace trillion::plan
