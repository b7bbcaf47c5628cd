// Binary token shards: one file per split, memory-mapped for reading. Layout (little-endian):
//
//   offset  size  field
//   0       8     magic "TRLTOKS\0"
//   8       4     format version (kShardFormatVersion)
//   12      4     bytes per token: 2 (uint16, vocab <= 65536) or 4 (uint32)
//   16      8     vocab size V (every token id < V)
//   24      8     token count N
//   32      8     metadata length M (bytes of UTF-8 JSON)
//   40      8     XXH64 (seed 0) of the token bytes
//   48      8     XXH64 of the metadata bytes
//   56      8     XXH64 of bytes [0, 56) (the header itself)
//   64      M     metadata JSON (split, source, entropy_rate, tokenizer, ...)
//   D       N*b   tokens, D = 64 + M rounded up to a multiple of 64; file size is exactly D + N*b
//
// Invariants: a shard that opens has passed every check (magic, version, sizes with
// overflow-checked arithmetic against the file size before anything past the header is read, the
// three checksums, the metadata fields readers use, every token < V); a shard is written
// atomically, so readers never see a partial one.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace trillion::data {

constexpr uint32_t kShardFormatVersion = 1;
constexpr int64_t kShardHeaderBytes = 64;
constexpr int64_t kMaxShardMetadataBytes = int64_t{1} << 30;

struct ShardInfo {
  std::string path;
  uint32_t version = kShardFormatVersion;
  uint32_t token_bytes = 2;
  int64_t vocab_size = 0;
  int64_t num_tokens = 0;
  int64_t data_offset = 0;
  uint64_t token_checksum = 0;
  nlohmann::json metadata;  // a JSON object; the fields below are checked copies of its own
  std::optional<double> entropy_rate;    // "entropy_rate": finite, >= 0 (nats/token)
  std::optional<int64_t> text_bytes;     // "text_bytes": >= 0 (source text of these tokens)
  std::optional<std::string> tokenizer;  // "tokenizer": path of the tokenizer that made them
};

// Writes `tokens` as a shard; throws (leaving any existing file intact) if an id is out of range.
void write_shard(const std::string& path, std::span<const int32_t> tokens, int64_t vocab_size,
                 const nlohmann::json& metadata);

// Reads and checks a shard's header and metadata (not its tokens).
ShardInfo read_shard_info(const std::string& path);

// One or more shards of the same vocabulary, memory-mapped; each shard is one piece.
class ShardDataset : public TokenDataset {
 public:
  // Opens and fully verifies every shard (checksums and token range).
  explicit ShardDataset(std::vector<std::string> paths);
  ~ShardDataset() override;
  ShardDataset(const ShardDataset&) = delete;
  ShardDataset& operator=(const ShardDataset&) = delete;

  int64_t vocab_size() const override { return vocab_size_; }
  std::optional<double> entropy_rate() const override { return entropy_rate_; }
  std::optional<double> bytes_per_token() const override;
  std::string describe() const override;
  const std::vector<ShardInfo>& shards() const { return shards_; }

 protected:
  void copy_tokens(int64_t piece, int64_t offset, int64_t count, int32_t* out) const override;

 private:
  void open_one(const std::string& path);
  struct Mapping {
    void* address = nullptr;
    size_t length = 0;
  };
  std::vector<ShardInfo> shards_;
  std::vector<Mapping> mappings_;
  int64_t vocab_size_ = 0;
  std::optional<double> entropy_rate_;
};

// The shard file of `split` inside a directory written by `trillion data prepare|synth`.
std::string shard_path(const std::string& directory, Split split);
// The shard files of `split` in a prepared directory: those manifest.json lists for it, in
// order, or DIRECTORY/train.bin (val.bin) when there is no manifest.
std::vector<std::string> split_shard_paths(const std::string& directory, Split split);
// Opens the shards of `split` (split_shard_paths) as one dataset, each shard one piece.
std::shared_ptr<TokenDataset> open_shard_dataset(const std::string& directory, Split split);

}  // namespace trillion::data
