// Writes one token shard (data/shard.h's layout) as tokens arrive, so a split of any size is
// written with bounded memory. The metadata is known only at the end, so a fixed area is reserved
// for it before the tokens and filled then, its JSON padded with spaces (which JSON readers
// skip); the token checksum is computed as the tokens stream through. Invariants: the file at
// `path` is complete only after finish() returns (it is written in place under a staging name
// that the caller renames); a writer destroyed before finish() removes its file; every token is
// checked against the vocabulary before it is written.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

namespace trillion::data {

constexpr int64_t kStreamedShardMetadataBytes = 16384 - 64;

class ShardWriter {
 public:
  ShardWriter(std::string path, int64_t vocab_size,
              int64_t metadata_bytes = kStreamedShardMetadataBytes);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  void append(std::span<const int32_t> tokens);
  int64_t tokens() const { return tokens_; }
  // Writes the metadata (an Error if its JSON exceeds the reserved bytes) and the header, then
  // fsyncs and closes the file.
  void finish(const nlohmann::json& metadata);
  const std::string& path() const { return path_; }

 private:
  void flush();
  std::string path_;
  int64_t vocab_size_, metadata_bytes_, tokens_ = 0;
  uint32_t token_bytes_;
  int fd_ = -1;
  std::string buffer_;
  void* hash_state_;  // XXH64_state_t
  bool finished_ = false;
};

}  // namespace trillion::data
