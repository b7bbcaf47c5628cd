// See files.h: the single checkpoint file writer and the helpers shared by the full
// (checkpoint.cpp) and sharded (sharded.cpp) formats.
#include "train/checkpoint/files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/error.h"
#include "data/file_io.h"

namespace fs = std::filesystem;

namespace trillion::checkpoint_detail {

namespace {

constexpr uintmax_t kMaxSmallFileBytes = 1 << 20;  // manifest.json: a few hundred bytes
constexpr const char* kTempPrefix = ".tmp-step_";

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
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

// Removes .tmp-step_N directories that a killed or failed write left behind.
void remove_stale_temps(const fs::path& root) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (entry.path().filename().string().starts_with(kTempPrefix)) fs::remove_all(entry, ec);
  }
}

fs::path checkpoint_root(const std::string& run_dir) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec || !fs::is_directory(root)) {
    std::error_code probe;  // a file holding the name says so, whatever errno the mkdir gave
    const bool file_in_way = fs::exists(root, probe) && !fs::is_directory(root, probe);
    throw Error(
        fmt::format("cannot create checkpoint directory '{}': {}", root.string(),
                    file_in_way || !ec ? "a file of that name is in the way" : ec.message()));
  }
  return root;
}

fs::path temp_dir(const fs::path& root, int64_t step) {
  return root / (kTempPrefix + fmt::format("{:08d}", step));
}

}  // namespace

CheckpointFileWriter::CheckpointFileWriter(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd_ < 0) fail("create");
  XXH64_state_t* sum = XXH64_createState();
  XXH64_reset(sum, 0);
  sum_ = sum;
}

CheckpointFileWriter::~CheckpointFileWriter() {
  if (sum_ != nullptr) XXH64_freeState(static_cast<XXH64_state_t*>(sum_));
  if (fd_ >= 0) ::close(fd_);
}

void CheckpointFileWriter::fail(const char* what) {
  const int error = errno;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  throw Error(fmt::format("cannot {} checkpoint file '{}': {}{}", what, path_, std::strerror(error),
                          data::write_error_hint(error)));
}

void CheckpointFileWriter::append(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  XXH64_update(static_cast<XXH64_state_t*>(sum_), p, bytes);
  bytes_ += bytes;
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write");
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

nlohmann::json CheckpointFileWriter::finish() {
  if (::fsync(fd_) != 0 && errno != EINVAL) fail("fsync");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int error = errno;
    throw Error(fmt::format("cannot close checkpoint file '{}': {}{}", path_, std::strerror(error),
                            data::write_error_hint(error)));
  }
  return nlohmann::json{{"bytes", bytes_},
                        {"xxh64", XXH64_digest(static_cast<XXH64_state_t*>(sum_))}};
}

nlohmann::json write_checkpoint_file(const std::string& path, const void* data, size_t bytes) {
  CheckpointFileWriter file(path);
  file.append(data, bytes);
  return file.finish();
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
  if (!fs::is_regular_file(path, ec))
    throw Error(fmt::format("{} is missing or not a regular file", name));
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
    manifest[name] = write_checkpoint_file((tmp / name).string(), bytes.data(), bytes.size());
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
                 const nlohmann::json& manifest, int64_t keep, const CheckpointNote& note) {
  const fs::path root = tmp.parent_path(), final_dir = root / step_name(step);
  const std::string m = manifest.dump(2);
  write_checkpoint_file((tmp / "manifest.json").string(), m.data(), m.size());
  fsync_path(tmp.string());
  fs::remove_all(final_dir);
  fs::rename(tmp, final_dir);
  fsync_path(root.string());
  apply_retention(run_dir, step, keep, note);
  return final_dir.string();
}

std::optional<std::string> incomplete_checkpoint(const std::string& dir) {
  try {
    const auto manifest = read_manifest(dir);
    for (const auto& [name, entry] : manifest) {
      if (name == "state.json") {
        const CheckpointState st =
            parse_checkpoint_state(read_checked(dir, manifest, name), "state.json");
        const auto named = checkpoint_step_of(fs::path(dir).filename().string());
        if (!named || st.step != *named) {
          return fmt::format("its state.json says step {}, its name does not", st.step);
        }
        continue;
      }
      const fs::path path = fs::path(dir) / name;
      std::error_code ec;
      if (!fs::is_regular_file(path, ec)) return name + " is missing or not a regular file";
      const uintmax_t size = fs::file_size(path, ec);
      if (ec || size != entry.bytes) {
        return fmt::format("{} has {} bytes, manifest says {}", name, ec ? 0 : size, entry.bytes);
      }
    }
  } catch (const Error& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

namespace {

enum class Removal { removed, pinned, failed };

// Deletes checkpoint `dir` unless a reader pins it (PinnedCheckpoint: a shared flock on the
// directory): the exclusive lock is taken without waiting and held while the directory is renamed
// to a temporary name (a kill midway leaves a .tmp-step_ that the next write removes, never a
// half-deleted step_N) and removed.
Removal remove_unpinned(const fs::path& dir, std::string* why) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Removal::removed;
    *why = std::strerror(errno);
    return Removal::failed;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    ::close(fd);
    return Removal::pinned;
  }
  const fs::path doomed =
      dir.parent_path() / (kTempPrefix + dir.filename().string().substr(5) + ".removed");
  std::error_code ec;
  fs::remove_all(doomed, ec);
  fs::rename(dir, doomed, ec);
  if (!ec) fs::remove_all(doomed, ec);
  ::close(fd);
  if (ec) *why = ec.message();
  return ec ? Removal::failed : Removal::removed;
}

}  // namespace

void apply_retention(const std::string& run_dir, int64_t step, int64_t keep,
                     const CheckpointNote& note) {
  const auto say = [&](const std::string& line) {
    if (note) {
      note(line);
    } else {
      std::fprintf(stderr, "trillion: %s\n", line.c_str());
    }
  };
  int64_t kept = 1;  // the checkpoint of `step`, just sealed
  for (const std::string& dir : list_checkpoints(run_dir)) {
    if (*checkpoint_step_of(fs::path(dir).filename().string()) >= step) continue;
    if (auto problem = incomplete_checkpoint(dir)) {
      say(fmt::format(
          "checkpoint retention leaves {} where it is: it is not a valid checkpoint ({}), so it "
          "is neither counted among checkpoint.keep = {} nor deleted; remove it if it is not "
          "needed",
          dir, *problem, keep));
      continue;
    }
    if (kept < keep) {
      ++kept;
      continue;
    }
    std::string why;
    switch (remove_unpinned(dir, &why)) {
      case Removal::removed:
        break;
      case Removal::pinned:
        say(fmt::format(
            "checkpoint retention leaves {} for now: a reader (generate, export, compare) holds "
            "it; a later checkpoint removes it",
            dir));
        break;
      case Removal::failed:
        say(fmt::format("checkpoint retention could not remove {}: {}", dir, why));
        break;
    }
  }
}

}  // namespace trillion::checkpoint_detail
