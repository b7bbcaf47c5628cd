// See checkpoint.h: manifest and state parsing, the full (one-process) format, listing (names
// exactly step_N), pinning for readers, verification and loading. Files go through files.h's one
// writer (errno with the path: EFBIG under `ulimit -f`, ENOSPC); every file is checked against
// the manifest's size before it is read, so a damaged manifest cannot make a reader allocate or
// read more. The sharded format and CheckpointReader live in sharded.cpp.
#include "train/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

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

std::string write_checkpoint(const std::string& run_dir, const CheckpointContents& c, int64_t keep,
                             const CheckpointNote& note) {
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
    return seal(run_dir, tmp, c.state.step, manifest, keep, note);
  } catch (const std::exception& e) {
    std::error_code ec;
    fs::remove_all(tmp, ec);  // nothing half-written stays; older checkpoints are untouched
    throw Error(fmt::format("checkpoint of step {} not written: {}", c.state.step, e.what()));
  }
}

std::optional<int64_t> checkpoint_step_of(std::string_view name) {
  constexpr std::string_view kPrefix = "step_";
  if (!name.starts_with(kPrefix)) return std::nullopt;
  const std::string_view digits = name.substr(kPrefix.size());
  if (digits.size() < 8 || digits.size() > 18) return std::nullopt;
  int64_t step = 0;
  for (const char d : digits) {
    if (d < '0' || d > '9') return std::nullopt;
    step = step * 10 + (d - '0');
  }
  if (step_name(step) != name) return std::nullopt;  // "step_012345678": not how N is written
  return step;
}

std::vector<std::string> list_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  const fs::path root = fs::path(run_dir) / "checkpoints";
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return {};
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const auto step = checkpoint_step_of(entry.path().filename().string());
    std::error_code kind;
    if (step && entry.is_directory(kind)) found.emplace_back(*step, entry.path().string());
  }
  if (ec) throw Error(fmt::format("cannot list '{}': {}", root.string(), ec.message()));
  std::sort(found.rbegin(), found.rend());  // by step: "step_100000000" is after "step_99999999"
  std::vector<std::string> dirs;
  for (auto& [step, dir] : found) dirs.push_back(std::move(dir));
  return dirs;
}

PinnedCheckpoint& PinnedCheckpoint::operator=(PinnedCheckpoint&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    dir_ = std::move(o.dir_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

PinnedCheckpoint::~PinnedCheckpoint() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor drops the flock
}

std::optional<PinnedCheckpoint> pin_checkpoint(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw Error(fmt::format("cannot open checkpoint '{}': {}", dir, std::strerror(errno)));
  }
  // Retention holds the exclusive lock while it removes a checkpoint: waiting here ends when the
  // directory is gone (seen below) or was never to be removed. A file system without flock
  // (ENOLCK, EOPNOTSUPP) is read unpinned.
  while (::flock(fd, LOCK_SH) != 0 && errno == EINTR) {
  }
  struct stat held = {};
  struct stat named = {};
  if (::fstat(fd, &held) != 0 || ::stat(dir.c_str(), &named) != 0 || held.st_ino != named.st_ino ||
      held.st_dev != named.st_dev) {
    ::close(fd);
    return std::nullopt;  // removed (or replaced) while this waited
  }
  return PinnedCheckpoint(dir, fd);
}

std::optional<PinnedCheckpoint> pin_newest_checkpoint(
    const std::string& run_dir, int64_t step,
    const std::function<void(const std::string&, const std::string&)>& on_corrupt) {
  std::set<std::string> reported;
  // A checkpoint removed under this reader means a newer one was written first: list again. The
  // bound only stops a directory that changes faster than it can be read.
  for (int listing = 0; listing < 100; ++listing) {
    bool removed = false;
    for (const std::string& dir : list_checkpoints(run_dir)) {
      if (step >= 0 && checkpoint_step_of(fs::path(dir).filename().string()) != step) continue;
      std::optional<PinnedCheckpoint> pin = pin_checkpoint(dir);
      if (!pin) {
        removed = true;
        continue;
      }
      if (auto problem = verify_checkpoint(dir)) {
        if (on_corrupt && reported.insert(dir).second) on_corrupt(dir, *problem);
        continue;
      }
      return pin;
    }
    if (!removed) break;
  }
  return std::nullopt;
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
