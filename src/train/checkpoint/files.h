// Internal to src/train/checkpoint/*.cpp: the one file writer every checkpoint file goes through
// (POSIX calls, so a failed write reports errno with the path; fsync before close; size and
// XXH64 computed as the bytes go out) and the helpers the full and the sharded writer share.
// Invariant: a checkpoint exists only once seal() renamed its temp directory, manifest written
// last; retention deletes only what it checked to be an older complete checkpoint no reader pins.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "train/checkpoint/checkpoint.h"

namespace trillion::checkpoint_detail {

inline constexpr size_t kStreamBytes = 1 << 20;  // files are checksummed in pieces of this size

// Streams one checkpoint file: create, append pieces, finish() = fsync + close and returns
// {"bytes", "xxh64"} (a manifest entry). Throws Error naming the path and errno on any failure.
class CheckpointFileWriter {
 public:
  explicit CheckpointFileWriter(std::string path);
  ~CheckpointFileWriter();
  CheckpointFileWriter(const CheckpointFileWriter&) = delete;
  CheckpointFileWriter& operator=(const CheckpointFileWriter&) = delete;
  void append(const void* data, size_t bytes);
  nlohmann::json finish();

 private:
  [[noreturn]] void fail(const char* what);
  std::string path_;
  int fd_ = -1;
  void* sum_ = nullptr;  // XXH64_state_t
  uint64_t bytes_ = 0;
};

// One piece: the whole file at once. Returns its manifest entry.
nlohmann::json write_checkpoint_file(const std::string& path, const void* data, size_t bytes);

std::string step_name(int64_t step);
std::map<std::string, ManifestEntry> read_manifest(const std::string& dir);
// The bytes of a (small) file of a checkpoint, checked against the manifest.
std::string read_checked(const std::string& dir, const std::map<std::string, ManifestEntry>& m,
                         const std::string& name);
// Checks a file's size and XXH64 against its entry, reading it in kStreamBytes pieces.
void check_file(const std::string& dir, const std::string& name, const ManifestEntry& entry);
// Creates checkpoints/.tmp-step_N (removing stale ones a killed write left).
std::filesystem::path begin_temp(const std::string& run_dir, int64_t step);
// Writes state.json, config.toml and the extra files into `tmp` and records them in `manifest`.
void put_small_files(const std::filesystem::path& tmp, const CheckpointContents& c, int dtype_bytes,
                     nlohmann::json& manifest);
// manifest.json last, then the rename that makes the checkpoint exist; then retention.
std::string seal(const std::string& run_dir, const std::filesystem::path& tmp, int64_t step,
                 const nlohmann::json& manifest, int64_t keep, const CheckpointNote& note);
// Retention after checkpoint `step` was sealed (checkpoint.h says what it keeps and deletes).
void apply_retention(const std::string& run_dir, int64_t step, int64_t keep,
                     const CheckpointNote& note);
// Why `dir` is not a complete checkpoint of the step its name says, without reading the large
// files (manifest, every file present at its manifest size, state.json checked and naming the
// step), or nullopt. What retention checks before it counts or deletes a directory.
std::optional<std::string> incomplete_checkpoint(const std::string& dir);

}  // namespace trillion::checkpoint_detail
