// See checkpoint.h: the sharded format. Each rank streams its owned runs into params_rNNNNN.bin /
// optimizer_rNNNNN.bin plus a shard_rNNNNN.json index; rank 0 checks the runs tile the model,
// writes layout.json and seals. CheckpointReader reads either format by global element range.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_fields.h"
#include "data/file_io.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/files.h"

namespace fs = std::filesystem;

namespace trillion {

using namespace checkpoint_detail;

namespace {

std::string shard_file(const char* kind, int rank) {
  return fmt::format("{}_r{:05d}.bin", kind, rank);
}

}  // namespace

std::string begin_sharded_checkpoint(const std::string& run_dir, int64_t step) {
  return begin_temp(run_dir, step).string();
}

namespace {

// Streams the two state files of `runs` (in their order): `params_name` the parameters,
// `optimizer_name` the first moments then the second. Returns their manifest entries.
std::pair<nlohmann::json, nlohmann::json> write_state_files(const fs::path& tmp,
                                                            const std::string& params_name,
                                                            const std::string& optimizer_name,
                                                            const std::vector<ShardRun>& runs,
                                                            int dtype_bytes, WriteBuffer stage) {
  std::vector<char> zeros;  // a missing moment without a stage: one piece, made when needed
  auto write_file = [&](const std::string& name, auto&& for_each_run) {
    CheckpointFileWriter file((tmp / name).string());
    auto emit = [&](const char* from, size_t bytes) {  // from == nullptr: zeros
      if (stage.bytes == 0 && from != nullptr) return file.append(from, bytes);
      if (from == nullptr && stage.bytes == 0 && zeros.empty()) zeros.assign(kStreamBytes, 0);
      char* piece = stage.bytes > 0 ? stage.data : zeros.data();
      const size_t size = stage.bytes > 0 ? stage.bytes : zeros.size();
      if (from == nullptr && stage.bytes > 0) std::memset(piece, 0, std::min(size, bytes));
      for (size_t done = 0; done < bytes; done += size) {
        const size_t n = std::min(size, bytes - done);
        if (from != nullptr) std::memcpy(piece, from + done, n);
        file.append(piece, n);
      }
    };
    for_each_run(emit);
    return file.finish();
  };
  auto part = [&](const void* ShardRun::*which) {
    return [&, which](auto&& emit) {
      for (const ShardRun& r : runs) {
        emit(static_cast<const char*>(r.*which), static_cast<size_t>(r.length) * dtype_bytes);
      }
    };
  };
  nlohmann::json params = write_file(params_name, part(&ShardRun::params));
  nlohmann::json optimizer = write_file(optimizer_name, [&](auto&& emit) {
    part (&ShardRun::first_moment)(emit);
    part (&ShardRun::second_moment)(emit);
  });
  return {std::move(params), std::move(optimizer)};
}

constexpr const char* kFullIndex = "full_index.json";  // removed before the manifest is written

}  // namespace

void write_checkpoint_shard(const std::string& tmp, int rank, const std::vector<ShardRun>& runs,
                            int dtype_bytes, WriteBuffer stage) {
  nlohmann::json index = nlohmann::json::object();
  index["rank"] = rank;
  index["params"] = shard_file("params", rank);
  index["optimizer"] = shard_file("optimizer", rank);
  auto [params, optimizer] = write_state_files(
      tmp, shard_file("params", rank), shard_file("optimizer", rank), runs, dtype_bytes, stage);
  index["params_file"] = std::move(params);
  index["optimizer_file"] = std::move(optimizer);
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
  write_checkpoint_file((fs::path(tmp) / fmt::format("shard_r{:05d}.json", rank)).string(),
                        text.data(), text.size());
}

void write_full_state(const std::string& tmp, std::vector<ShardRun> runs, int64_t elements,
                      int dtype_bytes, WriteBuffer stage) {
  std::sort(runs.begin(), runs.end(),
            [](const ShardRun& a, const ShardRun& b) { return a.global < b.global; });
  int64_t next = 0;
  for (const ShardRun& r : runs) {
    TRILLION_CHECK(r.global == next, fmt::format("full checkpoint: a run at {} where {} was "
                                                 "expected (the runs do not tile the model)",
                                                 r.global, next));
    next += r.length;
  }
  TRILLION_CHECK(next == elements,
                 fmt::format("full checkpoint: the runs cover {} of {} elements", next, elements));
  auto [params, optimizer] =
      write_state_files(tmp, "params.bin", "optimizer.bin", runs, dtype_bytes, stage);
  const std::string text =
      nlohmann::json{{"params.bin", params}, {"optimizer.bin", optimizer}}.dump();
  write_checkpoint_file((fs::path(tmp) / kFullIndex).string(), text.data(), text.size());
}

std::string commit_full_checkpoint(const std::string& run_dir, const std::string& tmp_dir,
                                   const CheckpointContents& c, int dtype_bytes, int64_t keep,
                                   const CheckpointNote& note) {
  const fs::path tmp(tmp_dir);
  try {
    const fs::path index_path = tmp / kFullIndex;
    nlohmann::json manifest = parse_json(data::read_file_raw(index_path.string()), kFullIndex);
    fs::remove(index_path);
    put_small_files(tmp, c, dtype_bytes, manifest);
    return seal(run_dir, tmp, c.state.step, manifest, keep, note);
  } catch (const std::exception& e) {
    abandon_checkpoint(tmp_dir);
    throw Error(fmt::format("checkpoint of step {} not written: {}", c.state.step, e.what()));
  }
}

std::string commit_sharded_checkpoint(const std::string& run_dir, const std::string& tmp_dir,
                                      const ShardedLayout& layout, const CheckpointContents& c,
                                      int64_t keep, const CheckpointNote& note) {
  const fs::path tmp(tmp_dir);
  try {
    nlohmann::json manifest = nlohmann::json::object();
    nlohmann::json shards = nlohmann::json::array();
    std::vector<std::pair<int64_t, int64_t>> covered;
    for (int r = 0; r < layout.world; ++r) {
      const fs::path index_path = tmp / fmt::format("shard_r{:05d}.json", r);
      const nlohmann::json index =
          parse_json(data::read_file_raw(index_path.string()), index_path.filename().string());
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
    const std::string text = nlohmann::json{
        {"elements", layout.elements},
        {"dtype_bytes", layout.dtype_bytes},
        {"model_fingerprint", layout.model_fingerprint},
        {"world", layout.world},
        {"writer", writer},
        {"shards", shards}}.dump();
    manifest["layout.json"] =
        write_checkpoint_file((tmp / "layout.json").string(), text.data(), text.size());
    put_small_files(tmp, c, layout.dtype_bytes, manifest);
    return seal(run_dir, tmp, c.state.step, manifest, keep, note);
  } catch (const std::exception& e) {
    abandon_checkpoint(tmp_dir);
    throw Error(fmt::format("checkpoint of step {} not written: {}", c.state.step, e.what()));
  }
}

void abandon_checkpoint(const std::string& tmp) {
  std::error_code ec;
  fs::remove_all(tmp, ec);
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
      for (size_t k = first; k < segments_.size(); ++k)
        segments_[k].second_at = at + segments_[k].first_at;
      const uint64_t params_bytes = manifest.at(files_[pf]).bytes;
      const uint64_t optimizer_bytes = manifest.at(files_[of]).bytes;
      if (params_bytes != static_cast<uint64_t>(at) * dtype_bytes_ ||
          optimizer_bytes != 2 * params_bytes) {
        throw Error(
            fmt::format("{} has {} bytes and {} {}, but its ranges hold {} elements of {} "
                        "bytes (a truncated or foreign shard)",
                        files_[pf], params_bytes, files_[of], optimizer_bytes, at, dtype_bytes_));
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

}  // namespace trillion
