// See checkpoint.h: manifest and state parsing, the full (one-process) format, listing,
// verification and loading. Files go through files.h's one writer (errno with the path:
// EFBIG under `ulimit -f`, ENOSPC); every file is checked against the manifest's size before it is
// read, so a damaged manifest cannot make a reader allocate or read more. The sharded format and
// CheckpointReader live in sharded.cpp.
#include "train/checkpoint/checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_fields.h"
#include "data/file_io.h"
#include "train/checkpoint/files.h"

namespace fs = std::filesystem;

namespace trillion {

using namespace checkpoint_detail;

namespace {

constexpr const char* kCheckpointFiles[] = {"state.json", "config.toml"};
constexpr const char* kFullStateFiles[] = {"params.bin", "optimizer.bin"};  // or layout.json

}  // namespace

std::map<std::string, ManifestEntry> parse_checkpoint_manifest(std::string_view text,
                                                               const std::string& origin) {
  const nlohmann::json j = json_object(parse_json(text, origin), origin);
  std::map<std::string, ManifestEntry> entries;
  std::vector<const char*> required(std::begin(kCheckpointFiles), std::end(kCheckpointFiles));
  if (!json_has(j, "layout.json")) {
    required.insert(required.begin(), std::begin(kFullStateFiles), std::end(kFullStateFiles));
  }
  for (const char* name : required) {
    const nlohmann::json& e = json_field(j, name, origin);
    const std::string where = fmt::format("{} entry '{}'", origin, name);
    json_object(e, where);
    entries[name] = {json_uint(e, "bytes", where), json_uint(e, "xxh64", where)};
  }
  for (const auto& [name, e] : j.items()) {  // the run's other state (train/checkpoint/resume.h)
    if (entries.contains(name)) continue;
    const std::string where = fmt::format("{} entry '{}'", origin, name);
    if (name.empty() || name.find('/') != std::string::npos || name.starts_with(".")) {
      throw Error(fmt::format("{}: not a file name of a checkpoint", where));
    }
    json_object(e, where);
    entries[name] = {json_uint(e, "bytes", where), json_uint(e, "xxh64", where)};
  }
  return entries;
}

CheckpointState parse_checkpoint_state(std::string_view text, const std::string& origin,
                                       int* dtype_bytes) {
  const nlohmann::json j = json_object(parse_json(text, origin), origin);
  CheckpointState st;
  st.step = json_int(j, "step", origin, 0);
  st.optimizer_steps = json_int(j, "optimizer_steps", origin, 0);
  st.next_sample = json_uint(j, "next_sample", origin);
  st.seed = json_uint(j, "seed", origin);
  const int64_t size = json_has(j, "dtype_bytes") ? json_int(j, "dtype_bytes", origin) : 4;
  if (size != 4 && size != 8) {
    throw Error(
        fmt::format("{}: field 'dtype_bytes' = {}: expected 4 (f32) or 8 (f64)", origin, size));
  }
  if (dtype_bytes != nullptr) *dtype_bytes = static_cast<int>(size);
  return st;
}

std::string write_checkpoint(const std::string& run_dir, const CheckpointContents& c,
                             int64_t keep) {
  const fs::path tmp = begin_temp(run_dir, c.state.step);
  try {
    nlohmann::json manifest = nlohmann::json::object();
    auto put = [&](const std::string& name, const void* data, size_t bytes) {
      manifest[name] = write_checkpoint_file((tmp / name).string(), data, bytes);
    };
    put("params.bin", c.params->raw(), c.params->bytes());
    std::string moments;
    moments.append(static_cast<const char*>(c.first_moment->raw()), c.first_moment->bytes());
    moments.append(static_cast<const char*>(c.second_moment->raw()), c.second_moment->bytes());
    put("optimizer.bin", moments.data(), moments.size());
    put_small_files(tmp, c, static_cast<int>(dtype_size(c.params->dtype())), manifest);
    return seal(run_dir, tmp, c.state.step, manifest, keep);
  } catch (const std::exception& e) {
    std::error_code ec;
    fs::remove_all(tmp, ec);  // nothing half-written stays; older checkpoints are untouched
    throw Error(fmt::format("checkpoint of step {} not written: {}", c.state.step, e.what()));
  }
}

std::vector<std::string> list_checkpoints(const std::string& run_dir) {
  std::vector<std::string> dirs;
  const fs::path root = fs::path(run_dir) / "checkpoints";
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return dirs;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory(ec) && name.starts_with("step_")) dirs.push_back(entry.path().string());
  }
  if (ec) throw Error(fmt::format("cannot list '{}': {}", root.string(), ec.message()));
  std::sort(dirs.rbegin(), dirs.rend());  // zero-padded names sort by step
  return dirs;
}

std::optional<std::string> verify_checkpoint(const std::string& dir) {
  try {
    const auto manifest = read_manifest(dir);
    for (const auto& [name, entry] : manifest) {  // the run's extra files (CheckpointFile) too
      if (name == "state.json") {
        parse_checkpoint_state(read_checked(dir, manifest, name), "state.json");
      } else {
        check_file(dir, name, entry);
      }
    }
    CheckpointReader layout(dir);  // layout.json's shards: named in the manifest, covering once
    (void)layout;
  } catch (const Error& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

CheckpointState load_checkpoint(const std::string& dir, Buffer& params, Buffer* first_moment,
                                Buffer* second_moment) {
  std::optional<CheckpointReader> reader;
  try {
    if (auto problem = verify_checkpoint(dir)) throw Error(*problem);
    reader.emplace(dir);
  } catch (const Error& e) {
    throw Error(fmt::format("checkpoint '{}' is corrupt: {}", dir, e.what()));
  }
  const int64_t bytes = reader->elements() * reader->dtype_bytes();
  if (bytes != static_cast<int64_t>(params.bytes())) {
    throw Error(
        fmt::format("checkpoint '{}' holds {} parameter bytes but this model has {}: it is "
                    "a checkpoint of a different model config",
                    dir, bytes, params.bytes()));
  }
  using Part = CheckpointReader::Part;
  reader->read(Part::params, 0, reader->elements(), params.raw());
  if (first_moment != nullptr && second_moment != nullptr) {
    if (first_moment->bytes() + second_moment->bytes() != static_cast<size_t>(2 * bytes)) {
      throw Error(fmt::format(
          "checkpoint '{}' holds {} optimizer-state bytes but this model's optimizer has {}: it "
          "is a checkpoint of a different model or optimizer config",
          dir, 2 * bytes, first_moment->bytes() + second_moment->bytes()));
    }
    reader->read(Part::first_moment, 0, reader->elements(), first_moment->raw());
    reader->read(Part::second_moment, 0, reader->elements(), second_moment->raw());
  }
  return reader->state();
}

std::optional<std::string> read_checkpoint_file(const std::string& dir, const std::string& name) {
  try {
    const auto manifest = read_manifest(dir);
    if (!manifest.contains(name)) return std::nullopt;
    return read_checked(dir, manifest, name);
  } catch (const Error& e) {
    throw Error(fmt::format("checkpoint '{}' is corrupt: {}", dir, e.what()));
  }
}

std::string read_checkpoint_config(const std::string& dir) {
  try {
    return read_checked(dir, read_manifest(dir), "config.toml");
  } catch (const Error& e) {
    throw Error(fmt::format("checkpoint '{}' is corrupt: {}", dir, e.what()));
  }
}

CheckpointWeights read_checkpoint_weights(const std::string& dir) {
  try {
    if (auto problem = verify_checkpoint(dir)) throw Error(*problem);
    const CheckpointReader reader(dir);
    CheckpointWeights w;
    w.dtype_bytes = reader.dtype_bytes();
    w.bytes.resize(static_cast<size_t>(reader.elements()) * w.dtype_bytes);
    reader.read(CheckpointReader::Part::params, 0, reader.elements(), w.bytes.data());
    return w;
  } catch (const Error& e) {
    throw Error(fmt::format("checkpoint '{}' is corrupt: {}", dir, e.what()));
  }
}

}  // namespace trillion
