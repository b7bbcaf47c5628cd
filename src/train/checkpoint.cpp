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

constexpr const char* kCheckpointFiles[] = {"state.json", "config.toml"};
constexpr const char* kFullStateFiles[] = {"params.bin", "optimizer.bin"};  // or layout.json
constexpr size_t kStreamBytes = 1 << 20;  // files are checksummed in pieces of this size
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

// Checks a file's size and XXH64 against its entry, reading it in kStreamBytes pieces.
void check_file(const std::string& dir, const std::string& name, const ManifestEntry& entry) {
  const fs::path path = fs::path(dir) / name;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw Error(fmt::format("{} is missing or not a regular file", name));
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) throw Error(fmt::format("cannot stat {}: {}", path.string(), ec.message()));
  if (size != entry.bytes) {
    throw Error(fmt::format("{} has {} bytes, manifest says {}", name, size, entry.bytes));
  }
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error(fmt::format("cannot open {}: {}", path.string(), std::strerror(errno)));
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  std::vector<char> piece(kStreamBytes);
  uintmax_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, piece.data(), piece.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    XXH64_update(state, piece.data(), static_cast<size_t>(n));
    done += static_cast<uintmax_t>(n);
  }
  const uint64_t sum = XXH64_digest(state);
  XXH64_freeState(state);
  ::close(fd);
  if (done != size) throw Error(fmt::format("{} ended after {} of {} bytes", name, done, size));
  if (sum != entry.xxh64) throw Error(fmt::format("{} checksum mismatch", name));
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

namespace {

fs::path checkpoint_root(const std::string& run_dir) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec || !fs::is_directory(root)) {
    throw Error(fmt::format("cannot create checkpoint directory '{}': {}", root.string(),
                            ec ? ec.message() : "a file of that name is in the way"));
  }
  return root;
}

fs::path temp_dir(const fs::path& root, int64_t step) {
  return root / (kTempPrefix + fmt::format("{:08d}", step));
}

fs::path begin_temp(const std::string& run_dir, int64_t step) {
  const fs::path root = checkpoint_root(run_dir);
  remove_stale_temps(root);
  const fs::path tmp = temp_dir(root, step);
  std::error_code ec;
  fs::create_directories(tmp, ec);
  if (ec) {
    throw Error(fmt::format("checkpoint of step {} not written: cannot create '{}': {}", step,
                            tmp.string(), ec.message()));
  }
  return tmp;
}

// Writes state.json, config.toml and the extra files into `tmp` and records them in `manifest`.
void put_small_files(const fs::path& tmp, const CheckpointContents& c, int dtype_bytes,
                     nlohmann::json& manifest) {
  auto put = [&](const std::string& name, const std::string& bytes) {
    write_bytes((tmp / name).string(), bytes.data(), bytes.size());
    manifest[name] = {{"bytes", bytes.size()}, {"xxh64", XXH64(bytes.data(), bytes.size(), 0)}};
  };
  put("state.json", nlohmann::json{{"step", c.state.step},
                                   {"optimizer_steps", c.state.optimizer_steps},
                                   {"next_sample", c.state.next_sample},
                                   {"seed", c.state.seed},
                                   {"dtype_bytes", dtype_bytes}}
                        .dump(2));
  put("config.toml", c.config_toml);
  for (const CheckpointFile& f : c.extra) {
    TRILLION_CHECK(!manifest.contains(f.name) && f.name.find('/') == std::string::npos,
                   "checkpoint file name " + f.name);
    put(f.name, f.bytes);
  }
}

// manifest.json last, then the rename that makes the checkpoint exist; then retention.
std::string seal(const std::string& run_dir, const fs::path& tmp, int64_t step,
                 const nlohmann::json& manifest, int64_t keep) {
  const fs::path root = tmp.parent_path(), final_dir = root / step_name(step);
  const std::string m = manifest.dump(2);
  write_bytes((tmp / "manifest.json").string(), m.data(), m.size());
  fsync_path(tmp.string());
  fs::remove_all(final_dir);
  fs::rename(tmp, final_dir);
  fsync_path(root.string());
  std::error_code ec;
  const std::vector<std::string> all = list_checkpoints(run_dir);
  for (size_t i = static_cast<size_t>(std::max<int64_t>(keep, 1)); i < all.size(); ++i) {
    fs::remove_all(all[i], ec);
  }
  return final_dir.string();
}

std::string shard_file(const char* kind, int rank) {
  return fmt::format("{}_r{:05d}.bin", kind, rank);
}

}  // namespace

std::string write_checkpoint(const std::string& run_dir, const CheckpointContents& c,
                             int64_t keep) {
  const fs::path tmp = begin_temp(run_dir, c.state.step);
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
    put_small_files(tmp, c, static_cast<int>(dtype_size(c.params->dtype())), manifest);
    return seal(run_dir, tmp, c.state.step, manifest, keep);
  } catch (const std::exception& e) {
    std::error_code ec;
    fs::remove_all(tmp, ec);  // nothing half-written stays; older checkpoints are untouched
    throw Error(fmt::format("checkpoint of step {} not written: {}", c.state.step, e.what()));
  }
}

std::string begin_sharded_checkpoint(const std::string& run_dir, int64_t step) {
  return begin_temp(run_dir, step).string();
}

void write_checkpoint_shard(const std::string& tmp, int rank, const std::vector<ShardRun>& runs,
                            int dtype_bytes) {
  // Each file is streamed run by run from the rank's buffers; only the checksum state and, for a
  // missing moment, one piece of zeros are allocated.
  auto write_file = [&](const std::string& name, auto&& for_each_piece) {
    const std::string path = (fs::path(tmp) / name).string();
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    auto fail = [&](const char* what) {
      const int error = errno;
      if (fd >= 0) ::close(fd);
      throw Error(fmt::format("cannot {} checkpoint file '{}': {}{}", what, path,
                              std::strerror(error), data::write_error_hint(error)));
    };
    if (fd < 0) fail("create");
    XXH64_state_t* sum = XXH64_createState();
    XXH64_reset(sum, 0);
    uint64_t bytes = 0;
    for_each_piece([&](const char* p, size_t left) {
      XXH64_update(sum, p, left);
      bytes += left;
      while (left > 0) {
        const ssize_t n = ::write(fd, p, left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          XXH64_freeState(sum);
          fail("write");
        }
        p += n;
        left -= static_cast<size_t>(n);
      }
    });
    const uint64_t digest = XXH64_digest(sum);
    XXH64_freeState(sum);
    if (::fsync(fd) != 0 && errno != EINVAL) fail("fsync");
    if (::close(fd) != 0) {
      const int error = errno;
      throw Error(fmt::format("cannot close checkpoint file '{}': {}{}", path,
                              std::strerror(error), data::write_error_hint(error)));
    }
    return nlohmann::json{{"bytes", bytes}, {"xxh64", digest}};
  };
  const std::vector<char> zeros(kStreamBytes, 0);
  auto moment = [&](const void* ShardRun::*which) {
    return [&, which](auto&& emit) {
      for (const ShardRun& r : runs) {
        const size_t bytes = static_cast<size_t>(r.length) * dtype_bytes;
        if (r.*which != nullptr) {
          emit(static_cast<const char*>(r.*which), bytes);
          continue;
        }
        for (size_t done = 0; done < bytes; done += zeros.size()) {
          emit(zeros.data(), std::min(zeros.size(), bytes - done));
        }
      }
    };
  };
  nlohmann::json index = nlohmann::json::object();
  index["rank"] = rank;
  index["params"] = shard_file("params", rank);
  index["optimizer"] = shard_file("optimizer", rank);
  index["params_file"] = write_file(shard_file("params", rank), moment(&ShardRun::params));
  index["optimizer_file"] = write_file(shard_file("optimizer", rank), [&](auto&& emit) {
    moment(&ShardRun::first_moment)(emit);
    moment(&ShardRun::second_moment)(emit);
  });
  // Runs that continue each other in the model also do in the file: one range.
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const ShardRun& r : runs) {
    if (!merged.empty() && merged.back().first + merged.back().second == r.global) {
      merged.back().second += r.length;
    } else {
      merged.emplace_back(r.global, r.length);
    }
  }
  nlohmann::json ranges = nlohmann::json::array();
  for (const auto& [global, length] : merged) ranges.push_back({global, length});
  index["ranges"] = ranges;
  const std::string text = index.dump();
  write_bytes((fs::path(tmp) / fmt::format("shard_r{:05d}.json", rank)).string(), text.data(),
              text.size());
}

std::string commit_sharded_checkpoint(const std::string& run_dir, const std::string& tmp_dir,
                                      const ShardedLayout& layout, const CheckpointContents& c,
                                      int64_t keep) {
  const fs::path tmp(tmp_dir);
  try {
    nlohmann::json manifest = nlohmann::json::object();
    nlohmann::json shards = nlohmann::json::array();
    std::vector<std::pair<int64_t, int64_t>> covered;
    for (int r = 0; r < layout.world; ++r) {
      const fs::path index_path = tmp / fmt::format("shard_r{:05d}.json", r);
      const nlohmann::json index = parse_json(data::read_file_raw(index_path.string()),
                                              index_path.filename().string());
      manifest[index["params"].get<std::string>()] = index["params_file"];
      manifest[index["optimizer"].get<std::string>()] = index["optimizer_file"];
      for (const auto& range : index["ranges"]) {
        covered.emplace_back(range[0].get<int64_t>(), range[1].get<int64_t>());
      }
      shards.push_back({{"rank", r},
                        {"params", index["params"]},
                        {"optimizer", index["optimizer"]},
                        {"ranges", index["ranges"]}});
      fs::remove(index_path);
    }
    std::sort(covered.begin(), covered.end());
    int64_t next = 0;
    for (const auto& [global, length] : covered) {
      TRILLION_CHECK(global == next && length > 0,
                     fmt::format("sharded checkpoint: the ranks' runs do not tile the model (a "
                                 "run at {} where {} was expected)",
                                 global, next));
      next += length;
    }
    TRILLION_CHECK(next == layout.elements,
                   fmt::format("sharded checkpoint: the ranks' runs cover {} of {} elements", next,
                               layout.elements));
    nlohmann::json writer = nlohmann::json::object();
    for (const auto& [key, value] : layout.writer) writer[key] = value;
    const std::string text = nlohmann::json{{"elements", layout.elements},
                                            {"dtype_bytes", layout.dtype_bytes},
                                            {"model_fingerprint", layout.model_fingerprint},
                                            {"world", layout.world},
                                            {"writer", writer},
                                            {"shards", shards}}
                                 .dump();
    write_bytes((tmp / "layout.json").string(), text.data(), text.size());
    manifest["layout.json"] = {{"bytes", text.size()},
                               {"xxh64", XXH64(text.data(), text.size(), 0)}};
    put_small_files(tmp, c, layout.dtype_bytes, manifest);
    return seal(run_dir, tmp, c.state.step, manifest, keep);
  } catch (const std::exception& e) {
    abandon_checkpoint(tmp_dir);
    throw Error(fmt::format("checkpoint of step {} not written: {}", c.state.step, e.what()));
  }
}

void abandon_checkpoint(const std::string& tmp) {
  std::error_code ec;
  fs::remove_all(tmp, ec);
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

CheckpointReader::CheckpointReader(const std::string& dir) : dir_(dir) {
  const auto manifest = read_manifest(dir);
  state_ = parse_checkpoint_state(read_checked(dir, manifest, "state.json"), "state.json",
                                  &dtype_bytes_);
  auto file_index = [&](const std::string& name, const std::string& where) {
    if (!manifest.contains(name)) {
      throw Error(fmt::format("{} names '{}', which manifest.json does not list", where, name));
    }
    files_.push_back(name);
    return static_cast<int>(files_.size()) - 1;
  };
  if (!manifest.contains("layout.json")) {  // full: one segment of the whole model
    const uint64_t bytes = manifest.at("params.bin").bytes;
    elements_ = static_cast<int64_t>(bytes / dtype_bytes_);
    if (bytes % dtype_bytes_ != 0 || manifest.at("optimizer.bin").bytes != 2 * bytes) {
      throw Error(fmt::format("optimizer.bin has {} bytes; twice params.bin's {} expected",
                              manifest.at("optimizer.bin").bytes, bytes));
    }
    segments_.push_back({0, elements_, file_index("params.bin", "manifest.json"),
                         file_index("optimizer.bin", "manifest.json"), 0, 0, elements_});
  } else {
    const std::string origin = "layout.json";
    const nlohmann::json j =
        json_object(parse_json(read_checked(dir, manifest, origin), origin), origin);
    elements_ = json_int(j, "elements", origin, 0);
    fingerprint_ = json_uint(j, "model_fingerprint", origin);
    if (json_int(j, "dtype_bytes", origin) != dtype_bytes_) {
      throw Error("layout.json and state.json disagree on 'dtype_bytes'");
    }
    const nlohmann::json& shards = json_field(j, "shards", origin);
    if (!shards.is_array()) throw Error("layout.json: field 'shards' is not an array");
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string where = fmt::format("layout.json shard {}", i);
      const nlohmann::json& shard = json_object(shards[i], where);
      const int pf = file_index(json_string(shard, "params", where), where);
      const int of = file_index(json_string(shard, "optimizer", where), where);
      const nlohmann::json& ranges = json_field(shard, "ranges", where);
      if (!ranges.is_array()) throw Error(where + ": field 'ranges' is not an array");
      int64_t at = 0;
      const size_t first = segments_.size();
      for (const nlohmann::json& range : ranges) {
        if (!range.is_array() || range.size() != 2 || !range[0].is_number_integer() ||
            !range[1].is_number_integer() || range[0].get<int64_t>() < 0 ||
            range[1].get<int64_t>() <= 0) {
          throw Error(where + ": a range is not [global offset, positive length]");
        }
        segments_.push_back({range[0].get<int64_t>(), range[1].get<int64_t>(), pf, of, at, at, 0});
        at += range[1].get<int64_t>();
      }
      for (size_t k = first; k < segments_.size(); ++k) segments_[k].second_at = at + segments_[k].first_at;
      const uint64_t params_bytes = manifest.at(files_[pf]).bytes;
      const uint64_t optimizer_bytes = manifest.at(files_[of]).bytes;
      if (params_bytes != static_cast<uint64_t>(at) * dtype_bytes_ ||
          optimizer_bytes != 2 * params_bytes) {
        throw Error(fmt::format("{} has {} bytes and {} {}, but its ranges hold {} elements of {} "
                                "bytes (a truncated or foreign shard)",
                                files_[pf], params_bytes, files_[of], optimizer_bytes, at,
                                dtype_bytes_));
      }
    }
    std::sort(segments_.begin(), segments_.end(),
              [](const Segment& x, const Segment& y) { return x.global < y.global; });
    int64_t next = 0;
    for (const Segment& seg : segments_) {
      if (seg.global != next) {
        throw Error(fmt::format("layout.json: the shards' ranges {} element {} of {}",
                                seg.global < next ? "overlap at" : "leave a gap at", next,
                                elements_));
      }
      next += seg.length;
    }
    if (next != elements_) {
      throw Error(fmt::format("layout.json: the shards cover {} of {} elements", next, elements_));
    }
  }
  fds_.assign(files_.size(), -1);
}

CheckpointReader::~CheckpointReader() {
  for (int fd : fds_) {
    if (fd >= 0) ::close(fd);
  }
}

void CheckpointReader::read(Part part, int64_t global, int64_t n, void* dest) const {
  TRILLION_CHECK(global >= 0 && n >= 0 && global + n <= elements_, "checkpoint read out of range");
  char* out = static_cast<char*>(dest);
  // The segment holding `global`: the last one starting at or before it.
  auto it = std::upper_bound(segments_.begin(), segments_.end(), global,
                             [](int64_t g, const Segment& s) { return g < s.global; });
  for (--it; n > 0; ++it) {
    const int64_t skip = global - it->global, take = std::min(n, it->length - skip);
    const int file = part == Part::params ? it->params_file : it->optimizer_file;
    const int64_t at = (part == Part::params         ? it->params_at
                        : part == Part::first_moment ? it->first_at
                                                     : it->second_at) +
                       skip;
    if (fds_[file] < 0) {
      const std::string path = (fs::path(dir_) / files_[file]).string();
      fds_[file] = ::open(path.c_str(), O_RDONLY);
      if (fds_[file] < 0) {
        throw Error(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
      }
    }
    size_t left = static_cast<size_t>(take) * dtype_bytes_;
    off_t offset = static_cast<off_t>(at) * dtype_bytes_;
    while (left > 0) {
      const ssize_t got = ::pread(fds_[file], out, left, offset);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        throw Error(fmt::format("checkpoint '{}': {} ended early (changed since it was verified?)",
                                dir_, files_[file]));
      }
      out += got;
      offset += got;
      left -= static_cast<size_t>(got);
    }
    global += take;
    n -= take;
  }
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
