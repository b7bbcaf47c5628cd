// See checkpoint.h.
#include "train/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/error.h"

namespace fs = std::filesystem;

namespace trillion {

namespace {

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void write_bytes(const std::string& path, const void* data, size_t bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  out.close();
  if (!out) throw Error(fmt::format("cannot write checkpoint file '{}' (disk full?)", path));
  fsync_path(path);
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot read checkpoint file '{}'", path));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string step_name(int64_t step) {
  return fmt::format("step_{:08d}", step);
}

}  // namespace

std::string write_checkpoint(const std::string& run_dir, const CheckpointContents& c,
                             int64_t keep) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  fs::create_directories(root);
  const fs::path final_dir = root / step_name(c.state.step);
  const fs::path tmp = root / (".tmp-" + step_name(c.state.step));
  fs::remove_all(tmp);
  fs::create_directories(tmp);

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
  fsync_path(root.string());

  const std::vector<std::string> all = list_checkpoints(run_dir);
  for (size_t i = static_cast<size_t>(std::max<int64_t>(keep, 1)); i < all.size(); ++i) {
    fs::remove_all(all[i]);
  }
  return final_dir.string();
}

std::vector<std::string> list_checkpoints(const std::string& run_dir) {
  std::vector<std::string> dirs;
  const fs::path root = fs::path(run_dir) / "checkpoints";
  if (!fs::is_directory(root)) return dirs;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.starts_with("step_")) dirs.push_back(entry.path().string());
  }
  std::sort(dirs.rbegin(), dirs.rend());  // zero-padded names sort by step
  return dirs;
}

std::optional<std::string> verify_checkpoint(const std::string& dir) {
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(read_bytes((fs::path(dir) / "manifest.json").string()));
  } catch (const std::exception& e) {
    return std::string("manifest.json missing or unreadable");
  }
  for (const char* name : {"params.bin", "optimizer.bin", "state.json", "config.toml"}) {
    if (!manifest.contains(name)) return fmt::format("manifest has no entry for {}", name);
  }
  for (const auto& [name, entry] : manifest.items()) {  // extra files (CheckpointFile) too
    const fs::path p = fs::path(dir) / name;
    if (!fs::exists(p)) return fmt::format("{} is missing", name);
    const std::string bytes = read_bytes(p.string());
    if (bytes.size() != entry["bytes"].get<size_t>()) {
      return fmt::format("{} has {} bytes, manifest says {}", name, bytes.size(),
                         entry["bytes"].get<size_t>());
    }
    if (XXH64(bytes.data(), bytes.size(), 0) != entry["xxh64"].get<uint64_t>()) {
      return fmt::format("{} checksum mismatch", name);
    }
  }
  return std::nullopt;
}

CheckpointState load_checkpoint(const std::string& dir, Buffer& params, Buffer* first_moment,
                                Buffer* second_moment) {
  if (auto problem = verify_checkpoint(dir)) {
    throw Error(fmt::format("checkpoint '{}' is corrupt: {}", dir, *problem));
  }
  const std::string p = read_bytes((fs::path(dir) / "params.bin").string());
  if (p.size() != params.bytes()) {
    throw Error(
        fmt::format("checkpoint '{}' holds {} parameter bytes but this model has {}: it is "
                    "a checkpoint of a different model config",
                    dir, p.size(), params.bytes()));
  }
  std::memcpy(params.raw(), p.data(), p.size());
  if (first_moment != nullptr && second_moment != nullptr) {
    const std::string o = read_bytes((fs::path(dir) / "optimizer.bin").string());
    TRILLION_CHECK(o.size() == first_moment->bytes() + second_moment->bytes(),
                   "optimizer state size");
    std::memcpy(first_moment->raw(), o.data(), first_moment->bytes());
    std::memcpy(second_moment->raw(), o.data() + first_moment->bytes(), second_moment->bytes());
  }
  const auto s = nlohmann::json::parse(read_bytes((fs::path(dir) / "state.json").string()));
  CheckpointState st;
  st.step = s["step"];
  st.optimizer_steps = s["optimizer_steps"];
  st.next_sample = s["next_sample"];
  st.seed = s["seed"];
  return st;
}

std::optional<std::string> read_checkpoint_file(const std::string& dir, const std::string& name) {
  const fs::path p = fs::path(dir) / name;
  if (!fs::exists(p)) return std::nullopt;
  return read_bytes(p.string());
}

std::string read_checkpoint_config(const std::string& dir) {
  if (auto problem = verify_checkpoint(dir)) {
    throw Error(fmt::format("checkpoint '{}' is corrupt: {}", dir, *problem));
  }
  return read_bytes((fs::path(dir) / "config.toml").string());
}

}  // namespace trillion
