// See shard.h. xxHash is used header-only (XXH_INLINE_ALL), so nothing extra is linked.
#include "data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/error.h"
#include "data/file_io.h"

namespace trillion::data {

static_assert(std::endian::native == std::endian::little, "shards are little-endian");

namespace {
constexpr char kMagic[8] = {'T', 'R', 'L', 'T', 'O', 'K', 'S', '\0'};

int64_t align64(int64_t n) {
  return (n + 63) / 64 * 64;
}

template <typename T>
T load(const char* bytes) {
  T value;
  std::memcpy(&value, bytes, sizeof(T));
  return value;
}

template <typename T>
void store(char* bytes, T value) {
  std::memcpy(bytes, &value, sizeof(T));
}

[[noreturn]] void corrupt(const std::string& path, const std::string& what) {
  throw Error("shard '" + path + "' is corrupt: " + what +
              "; regenerate it with 'trillion data prepare' or 'trillion data synth'");
}

// Parses and checks the 64-byte header plus metadata from the first bytes of a file of
// `file_size` bytes.
ShardInfo parse_header(const std::string& path, const char* bytes, int64_t available,
                       int64_t file_size) {
  if (file_size < kShardHeaderBytes) {
    throw Error("shard '" + path + "' is truncated: " + std::to_string(file_size) +
                " bytes, shorter than the " + std::to_string(kShardHeaderBytes) +
                "-byte header; regenerate it");
  }
  if (std::memcmp(bytes, kMagic, 8) != 0) {
    throw Error("'" + path + "' is not a trillion token shard (bad magic); pass a file written " +
                "by 'trillion data prepare' or 'trillion data synth'");
  }
  ShardInfo info;
  info.path = path;
  info.version = load<uint32_t>(bytes + 8);
  if (load<uint64_t>(bytes + 56) != XXH64(bytes, 56, 0)) corrupt(path, "header checksum mismatch");
  if (info.version != kShardFormatVersion) {
    throw Error("shard '" + path + "' has format version " + std::to_string(info.version) +
                ", this build reads version " + std::to_string(kShardFormatVersion) +
                "; regenerate the shard with this build");
  }
  info.token_bytes = load<uint32_t>(bytes + 12);
  info.vocab_size = load<int64_t>(bytes + 16);
  info.num_tokens = load<int64_t>(bytes + 24);
  int64_t metadata_bytes = load<int64_t>(bytes + 32);
  info.token_checksum = load<uint64_t>(bytes + 40);
  if (info.token_bytes != 2 && info.token_bytes != 4) {
    corrupt(path, "token size " + std::to_string(info.token_bytes) + " is not 2 or 4");
  }
  if (info.vocab_size < 1 || info.num_tokens < 0 || metadata_bytes < 0 ||
      metadata_bytes > (int64_t{1} << 30)) {
    corrupt(path, "implausible header values");
  }
  info.data_offset = align64(kShardHeaderBytes + metadata_bytes);
  int64_t expected = info.data_offset + info.num_tokens * info.token_bytes;
  if (file_size < expected) {
    throw Error("shard '" + path + "' is truncated: " + std::to_string(file_size) +
                " bytes, the header promises " + std::to_string(expected) + " (" +
                std::to_string(info.num_tokens) + " tokens); regenerate it");
  }
  if (file_size > expected) {
    corrupt(path, std::to_string(file_size - expected) + " unexpected bytes after the tokens");
  }
  TRILLION_CHECK(available >= kShardHeaderBytes + metadata_bytes, "header not fully read");
  const char* metadata = bytes + kShardHeaderBytes;
  if (load<uint64_t>(bytes + 48) != XXH64(metadata, metadata_bytes, 0)) {
    corrupt(path, "metadata checksum mismatch");
  }
  try {
    info.metadata = nlohmann::json::parse(std::string_view(metadata, metadata_bytes));
  } catch (const nlohmann::json::exception& e) {
    corrupt(path, std::string("metadata is not JSON: ") + e.what());
  }
  return info;
}

int open_or_throw(const std::string& path, int64_t& size) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    throw Error(
        "cannot open shard '" + path + "': " + std::strerror(errno) +
        (errno == ENOENT ? " (run 'trillion data prepare' or 'data synth' to create it)" : ""));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw Error("cannot stat shard '" + path + "': " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error("shard '" + path + "' is not a regular file; pass a .bin shard file");
  }
  size = st.st_size;
  return fd;
}
}  // namespace

void write_shard(const std::string& path, std::span<const int32_t> tokens, int64_t vocab_size,
                 const nlohmann::json& metadata) {
  if (vocab_size < 1 || vocab_size > (int64_t{1} << 31)) {
    throw Error("cannot write shard '" + path + "': vocab size " + std::to_string(vocab_size) +
                " is out of range [1, 2^31]");
  }
  const uint32_t token_bytes = vocab_size <= 65536 ? 2 : 4;
  std::string data(tokens.size() * token_bytes, '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_size) {
      throw Error("cannot write shard '" + path + "': token " + std::to_string(i) + " has id " +
                  std::to_string(tokens[i]) + ", not in [0, vocab size " +
                  std::to_string(vocab_size) + "); check the tokenizer's vocab size");
    }
    if (token_bytes == 2) {
      store(&data[i * 2], static_cast<uint16_t>(tokens[i]));
    } else {
      store(&data[i * 4], static_cast<uint32_t>(tokens[i]));
    }
  }
  std::string meta = metadata.dump();
  std::string header(align64(kShardHeaderBytes + meta.size()), '\0');
  std::memcpy(header.data(), kMagic, 8);
  store(&header[8], kShardFormatVersion);
  store(&header[12], token_bytes);
  store(&header[16], vocab_size);
  store(&header[24], static_cast<int64_t>(tokens.size()));
  store(&header[32], static_cast<int64_t>(meta.size()));
  store(&header[40], static_cast<uint64_t>(XXH64(data.data(), data.size(), 0)));
  store(&header[48], static_cast<uint64_t>(XXH64(meta.data(), meta.size(), 0)));
  store(&header[56], static_cast<uint64_t>(XXH64(header.data(), 56, 0)));
  std::memcpy(&header[kShardHeaderBytes], meta.data(), meta.size());
  write_file_atomic(path, {header, data});
}

ShardInfo read_shard_info(const std::string& path) {
  int64_t size = 0;
  int fd = open_or_throw(path, size);
  std::string head(static_cast<size_t>(std::min<int64_t>(size, kShardHeaderBytes)), '\0');
  ssize_t n = ::pread(fd, head.data(), head.size(), 0);
  if (n == static_cast<ssize_t>(head.size()) && size >= kShardHeaderBytes &&
      std::memcmp(head.data(), kMagic, 8) == 0) {
    int64_t metadata_bytes = load<int64_t>(head.data() + 32);
    if (metadata_bytes > 0 && metadata_bytes <= (int64_t{1} << 30) &&
        kShardHeaderBytes + metadata_bytes <= size) {
      head.resize(kShardHeaderBytes + metadata_bytes);
      n = ::pread(fd, head.data(), head.size(), 0);
    }
  }
  ::close(fd);
  if (n < 0) throw Error("cannot read shard '" + path + "': " + std::strerror(errno));
  return parse_header(path, head.data(), static_cast<int64_t>(head.size()), size);
}

ShardDataset::ShardDataset(std::vector<std::string> paths) {
  if (paths.empty()) throw Error("no shard files given; pass at least one shard");
  try {
    for (const std::string& path : paths) open_one(path);
  } catch (...) {
    for (const Mapping& m : mappings_) ::munmap(m.address, m.length);  // no destructor runs
    throw;
  }
}

void ShardDataset::open_one(const std::string& path) {
  int64_t size = 0;
  int fd = open_or_throw(path, size);
  void* address = size > 0 ? ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0) : nullptr;
  ::close(fd);
  if (address == MAP_FAILED) {
    throw Error("cannot memory-map shard '" + path + "': " + std::strerror(errno));
  }
  mappings_.push_back({address, static_cast<size_t>(size)});
  const char* bytes = static_cast<const char*>(address);
  // parse_header reads only within the file: it checks the size before the metadata.
  ShardInfo info = parse_header(path, bytes, size, size);
  const char* data = bytes + info.data_offset;
  size_t data_bytes = static_cast<size_t>(info.num_tokens) * info.token_bytes;
  if (XXH64(data, data_bytes, 0) != info.token_checksum) {
    corrupt(path, "token checksum mismatch");
  }
  for (int64_t i = 0; i < info.num_tokens; ++i) {
    int64_t id =
        info.token_bytes == 2 ? load<uint16_t>(data + 2 * i) : load<uint32_t>(data + 4 * i);
    if (id >= info.vocab_size) {
      throw Error("shard '" + path + "': token " + std::to_string(i) + " has id " +
                  std::to_string(id) + " >= vocab size " + std::to_string(info.vocab_size) +
                  "; the shard was written with a wrong vocab size, regenerate it");
    }
  }
  if (!shards_.empty() && info.vocab_size != vocab_size_) {
    throw Error("vocabulary mismatch: shard '" + path + "' has vocab size " +
                std::to_string(info.vocab_size) + " but '" + shards_[0].path + "' has " +
                std::to_string(vocab_size_) + "; use shards made with one tokenizer");
  }
  vocab_size_ = info.vocab_size;
  std::optional<double> rate;
  if (info.metadata.contains("entropy_rate")) rate = info.metadata["entropy_rate"].get<double>();
  entropy_rate_ = shards_.empty() || rate == entropy_rate_ ? rate : std::nullopt;
  piece_tokens_.push_back(info.num_tokens);
  shards_.push_back(std::move(info));
}

ShardDataset::~ShardDataset() {
  for (const Mapping& m : mappings_) {
    if (m.address != nullptr) ::munmap(m.address, m.length);
  }
}

std::optional<double> ShardDataset::bytes_per_token() const {
  int64_t bytes = 0;
  for (const ShardInfo& info : shards_) {
    if (!info.metadata.contains("text_bytes")) return std::nullopt;
    bytes += info.metadata["text_bytes"].get<int64_t>();
  }
  return num_tokens() > 0 ? std::optional<double>(static_cast<double>(bytes) / num_tokens())
                          : std::nullopt;
}

std::string ShardDataset::describe() const {
  std::string text = "shard '" + shards_[0].path + "'";
  if (shards_.size() > 1) text += " and " + std::to_string(shards_.size() - 1) + " more";
  return text;
}

void ShardDataset::copy_tokens(int64_t piece, int64_t offset, int64_t count, int32_t* out) const {
  const ShardInfo& info = shards_[piece];
  const char* data = static_cast<const char*>(mappings_[piece].address) + info.data_offset;
  if (info.token_bytes == 2) {
    for (int64_t i = 0; i < count; ++i) out[i] = load<uint16_t>(data + 2 * (offset + i));
  } else {
    for (int64_t i = 0; i < count; ++i) {
      out[i] = static_cast<int32_t>(load<uint32_t>(data + 4 * (offset + i)));
    }
  }
}

std::string shard_path(const std::string& directory, Split split) {
  return (std::filesystem::path(directory) / (std::string(split_name(split)) + ".bin")).string();
}

std::shared_ptr<TokenDataset> open_shard_dataset(const std::string& directory, Split split) {
  return std::make_shared<ShardDataset>(std::vector<std::string>{shard_path(directory, split)});
}

}  // namespace trillion::data
