// See checkpoint.h. Files are written with POSIX calls so a failed write reports errno (EFBIG
// under `ulimit -f`, ENOSPC) with the path; every file is checked against the manifest's size
// before it is read, so a damaged manifest cannot make a reader allocate or read more.
#include "train/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/error.h"
#include "core/json_fields.h"
#include "data/file_io.h"

namespace fs = std::filesystem;

namespace trillion {

namespace {

constexpr const char* kCheckpointFiles[] = {"params.bin", "optimizer.bin", "state.json",
                                            "config.toml"};
constexpr uintmax_t kMaxSmallFileBytes = 1 << 20;  // manifest.json: a few hundred bytes
constexpr const char* kTempPrefix = ".tmp-step_";

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void write_bytes(const std::string& path, const void* data, size_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  auto fail = [&](const char* what) {
    const int error = errno;
    if (fd >= 0) ::close(fd);
    throw Error(fmt::format("cannot {} checkpoint file '{}': {}{}", what, path,
                            std::strerror(error), data::write_error_hint(error)));
  };
  if (fd < 0) fail("create");
  const char* p = static_cast<const char*>(data);
  size_t left = bytes;
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write");
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 && errno != EINVAL) fail("fsync");
  if (::close(fd) != 0) {
    const int error = errno;
    throw Error(fmt::format("cannot close checkpoint file '{}': {}{}", path, std::strerror(error),
                            data::write_error_hint(error)));
  }
}

// Reads a file that must be exactly `expected` bytes (checked before reading).
std::string read_exact(const fs::path& path, uintmax_t expected) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    throw Error(fmt::format("{} is missing or not a regular file", path.filename().string()));
  }
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) throw Error(fmt::format("cannot stat {}: {}", path.string(), ec.message()));
  if (size != expected) {
    throw Error(
        fmt::format("{} has {} bytes, manifest says {}", path.filename().string(), size, expected));
  }
  return data::read_file_raw(path.string());
}

std::string step_name(int64_t step) {
  return fmt::format("step_{:08d}", step);
}

std::map<std::string, ManifestEntry> read_manifest(const std::string& dir) {
  const fs::path path = fs::path(dir) / "manifest.json";
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw Error("manifest.json is missing");
  const uintmax_t size = fs::file_size(path, ec);
  if (ec || size > kMaxSmallFileBytes) {
    throw Error(fmt::format("manifest.json has {} bytes, more than a manifest can hold", size));
  }
  return parse_checkpoint_manifest(data::read_file_raw(path.string()), "manifest.json");
}

// The bytes of every file of a checkpoint, each checked against the manifest.
std::string read_checked(const std::string& dir, const std::map<std::string, ManifestEntry>& m,
                         const std::string& name) {
  const ManifestEntry& entry = m.at(name);  // parse_checkpoint_manifest requires every entry
  std::string bytes = read_exact(fs::path(dir) / name, entry.bytes);
  if (XXH64(bytes.data(), bytes.size(), 0) != entry.xxh64) {
    throw Error(fmt::format("{} checksum mismatch", name));
  }
  return bytes;
}

// Removes .tmp-step_N directories that a killed or failed write left behind.
void remove_stale_temps(const fs::path& root) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (entry.path().filename().string().starts_with(kTempPrefix)) fs::remove_all(entry, ec);
  }
}

}  // namespace

std::map<std::string, ManifestEntry> parse_checkpoint_manifest(std::string_view text,
                                                               const std::string& origin) {
  const nlohmann::json j = json_object(parse_json(text, origin), origin);
  std::map<std::string, ManifestEntry> entries;
  for (const char* name : kCheckpointFiles) {
    const nlohmann::json& e = json_field(j, name, origin);
    const std::string where = fmt::format("{} entry '{}'", origin, name);
    json_object(e, where);
    entries[name] = {json_uint(e, "bytes", where), json_uint(e, "xxh64", where)};
  }
  for (const auto& [name, e] : j.items()) {  // the run's other state (train/resume.h)
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
  const fs::path root = fs::path(run_dir) / "checkpoints";
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec || !fs::is_directory(root)) {
    throw Error(fmt::format("cannot create checkpoint directory '{}': {}", root.string(),
                            ec ? ec.message() : "a file of that name is in the way"));
  }
  remove_stale_temps(root);
  const fs::path final_dir = root / step_name(c.state.step);
  const fs::path tmp = root / (kTempPrefix + fmt::format("{:08d}", c.state.step));
  fs::create_directories(tmp, ec);
  if (ec) throw Error(fmt::format("cannot create '{}': {}", tmp.string(), ec.message()));
  try {
    nlohmann::json manifest = nlohmann::json::object();
    auto put = [&](const std::string& name, const void* data, size_t bytes) {
      write_bytes((tmp / name).string(), data, bytes);
      manifest[name] = {{"bytes", bytes}, {"xxh64", XXH64(data, bytes, 0)}};
    };
    put("params.bin", c.params->raw(), c.params->bytes());
    std::string moments;
    moments.append(static_cast<const char*>(c.first_moment->raw()), c.first_moment->bytes());
    moments.append(static_cast<const char*>(c.second_moment->raw()), c.second_moment->bytes());
    put("optimizer.bin", moments.data(), moments.size());
    const std::string state = nlohmann::json{{"step", c.state.step},
                                             {"optimizer_steps", c.state.optimizer_steps},
                                             {"next_sample", c.state.next_sample},
                                             {"seed", c.state.seed},
                                             {"dtype_bytes", dtype_size(c.params->dtype())}}
                                  .dump(2);
    put("state.json", state.data(), state.size());
    put("config.toml", c.config_toml.data(), c.config_toml.size());
    for (const CheckpointFile& f : c.extra) {
      TRILLION_CHECK(!manifest.contains(f.name) && f.name.find('/') == std::string::npos,
                     "checkpoint file name " + f.name);
      put(f.name, f.bytes.data(), f.bytes.size());
    }
    const std::string m = manifest.dump(2);
    write_bytes((tmp / "manifest.json").string(), m.data(), m.size());
    fsync_path(tmp.string());
    fs::remove_all(final_dir);
    fs::rename(tmp, final_dir);
  } catch (const std::exception& e) {
    fs::remove_all(tmp, ec);  // nothing half-written stays; older checkpoints are untouched
    throw Error(fmt::format("checkpoint of step {} not written: {}", c.state.step, e.what()));
  }
  fsync_path(root.string());

  const std::vector<std::string> all = list_checkpoints(run_dir);
  for (size_t i = static_cast<size_t>(std::max<int64_t>(keep, 1)); i < all.size(); ++i) {
    fs::remove_all(all[i], ec);
  }
  return final_dir.string();
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
      const std::string bytes = read_checked(dir, manifest, name);
      if (name == "state.json") parse_checkpoint_state(bytes, "state.json");
    }
  } catch (const Error& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

CheckpointState load_checkpoint(const std::string& dir, Buffer& params, Buffer* first_moment,
                                Buffer* second_moment) {
  const auto corrupt = [&](const std::string& problem) {
    return Error(fmt::format("checkpoint '{}' is corrupt: {}", dir, problem));
  };
  std::map<std::string, ManifestEntry> manifest;
  std::string p, o, s;
  CheckpointState st;
  try {
    manifest = read_manifest(dir);
    s = read_checked(dir, manifest, "state.json");
    st = parse_checkpoint_state(s, "state.json");
    p = read_checked(dir, manifest, "params.bin");
    if (first_moment != nullptr && second_moment != nullptr) {
      o = read_checked(dir, manifest, "optimizer.bin");
    }
  } catch (const Error& e) {
    throw corrupt(e.what());
  }
  if (p.size() != params.bytes()) {
    throw Error(
        fmt::format("checkpoint '{}' holds {} parameter bytes but this model has {}: it is "
                    "a checkpoint of a different model config",
                    dir, p.size(), params.bytes()));
  }
  std::memcpy(params.raw(), p.data(), p.size());
  if (first_moment != nullptr && second_moment != nullptr) {
    if (o.size() != first_moment->bytes() + second_moment->bytes()) {
      throw Error(fmt::format(
          "checkpoint '{}' holds {} optimizer-state bytes but this model's optimizer has {}: it "
          "is a checkpoint of a different model or optimizer config",
          dir, o.size(), first_moment->bytes() + second_moment->bytes()));
    }
    std::memcpy(first_moment->raw(), o.data(), first_moment->bytes());
    std::memcpy(second_moment->raw(), o.data() + first_moment->bytes(), second_moment->bytes());
  }
  return st;
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
    const auto manifest = read_manifest(dir);
    CheckpointWeights w;
    parse_checkpoint_state(read_checked(dir, manifest, "state.json"), "state.json", &w.dtype_bytes);
    w.bytes = read_checked(dir, manifest, "params.bin");
    return w;
  } catch (const Error& e) {
    throw Error(fmt::format("checkpoint '{}' is corrupt: {}", dir, e.what()));
  }
}

}  // namespace trillion
