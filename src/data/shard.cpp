// See shard.h. xxHash is used header-only (XXH_INLINE_ALL), so nothing extra is linked.
#include "data/shard.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/checked_math.h"
#include "core/error.h"
#include "core/json_fields.h"
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

// Checks the metadata fields that readers use (entropy_rate, text_bytes, tokenizer), so that
// later code can read them without a type check of its own.
void check_metadata(const std::string& path, ShardInfo& info) {
  const std::string origin = "shard '" + path + "' metadata";
  if (info.metadata.is_null()) info.metadata = nlohmann::json::object();  // written without any
  const nlohmann::json& m = info.metadata;
  if (!m.is_object()) corrupt(path, "metadata is " + json_kind(m) + ", not a JSON object");
  try {
    if (json_has(m, "entropy_rate")) {
      const double h = json_number(m, "entropy_rate", origin);
      if (h < 0) throw Error(origin + ": field 'entropy_rate' = " + std::to_string(h) + " < 0");
      info.entropy_rate = h;
    }
    if (json_has(m, "text_bytes")) info.text_bytes = json_int(m, "text_bytes", origin, 0);
    if (json_has(m, "tokenizer")) info.tokenizer = json_string(m, "tokenizer", origin);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) +
                "; regenerate the shard with 'trillion data prepare' or 'trillion data synth'");
  }
}

// Parses and checks the 64-byte header plus metadata from the first `available` bytes of a file
// of `file_size` bytes. Every size from the header is range-checked with overflow-checked
// arithmetic against the file size before anything past the header is read.
ShardInfo parse_header(const std::string& path, const char* bytes, int64_t available,
                       int64_t file_size) {
  if (file_size < kShardHeaderBytes || available < kShardHeaderBytes) {
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
  const int64_t metadata_bytes = load<int64_t>(bytes + 32);
  info.token_checksum = load<uint64_t>(bytes + 40);
  if (info.token_bytes != 2 && info.token_bytes != 4) {
    corrupt(path, "token size " + std::to_string(info.token_bytes) + " is not 2 or 4");
  }
  const int64_t max_vocab = info.token_bytes == 2 ? int64_t{1} << 16 : int64_t{1} << 31;
  if (info.vocab_size < 1 || info.vocab_size > max_vocab) {
    corrupt(path, "vocab size " + std::to_string(info.vocab_size) + " is not in [1, " +
                      std::to_string(max_vocab) + "] for " + std::to_string(info.token_bytes) +
                      "-byte tokens");
  }
  if (info.num_tokens < 0) corrupt(path, "token count " + std::to_string(info.num_tokens) + " < 0");
  if (metadata_bytes < 0 || metadata_bytes > kMaxShardMetadataBytes) {
    corrupt(path, "metadata length " + std::to_string(metadata_bytes) + " is not in [0, " +
                      std::to_string(kMaxShardMetadataBytes) + "]");
  }
  info.data_offset = align64(kShardHeaderBytes + metadata_bytes);
  const std::optional<int64_t> token_data = checked_mul(info.num_tokens, info.token_bytes);
  const std::optional<int64_t> expected =
      token_data ? checked_add(info.data_offset, *token_data) : std::nullopt;
  if (!expected) {
    corrupt(path, "token count " + std::to_string(info.num_tokens) + " x " +
                      std::to_string(info.token_bytes) + " bytes overflows a file size");
  }
  if (file_size < *expected) {
    throw Error("shard '" + path + "' is truncated: " + std::to_string(file_size) +
                " bytes, the header promises " + std::to_string(*expected) + " (" +
                std::to_string(info.num_tokens) + " tokens); regenerate it");
  }
  if (file_size > *expected) {
    corrupt(path, std::to_string(file_size - *expected) + " unexpected bytes after the tokens");
  }
  if (available < kShardHeaderBytes + metadata_bytes) {  // the file shrank while it was read
    throw Error("shard '" + path + "' changed while it was being read; is another process " +
                "writing it?");
  }
  const char* metadata = bytes + kShardHeaderBytes;
  if (load<uint64_t>(bytes + 48) != XXH64(metadata, metadata_bytes, 0)) {
    corrupt(path, "metadata checksum mismatch");
  }
  info.metadata = nlohmann::json::parse(std::string_view(metadata, metadata_bytes), nullptr,
                                        /*allow_exceptions=*/false);
  if (info.metadata.is_discarded()) corrupt(path, "metadata is not valid JSON");
  check_metadata(path, info);
  return info;
}

int open_or_throw(const std::string& path, int64_t& size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK);  // a FIFO must not block open()
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
    throw Error("shard '" + path + "' is " + non_regular_kind(st.st_mode) +
                ", not a regular file; pass a .bin shard file");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
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
  if (!metadata.is_object() && !metadata.is_null()) {
    throw Error("cannot write shard '" + path + "': metadata must be a JSON object");
  }
  // Invalid UTF-8 (a file name in `inputs`) is replaced rather than thrown on by dump().
  const std::string meta =
      metadata.is_null() ? std::string("{}")
                         : metadata.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
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
  const int fd = open_or_throw(path, size);
  // The header first, then (only if its length is plausible and within the file) the metadata;
  // parse_header makes every check, so a short read here only shortens `head`.
  std::string head(static_cast<size_t>(std::min<int64_t>(size, kShardHeaderBytes)), '\0');
  auto read_all = [&](std::string& out) {
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const std::string reason = std::strerror(errno);
        ::close(fd);
        throw Error("cannot read shard '" + path + "': " + reason);
      }
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    out.resize(done);
  };
  read_all(head);
  if (static_cast<int64_t>(head.size()) == kShardHeaderBytes) {
    const int64_t metadata_bytes = load<int64_t>(head.data() + 32);
    if (metadata_bytes > 0 && metadata_bytes <= kMaxShardMetadataBytes &&
        metadata_bytes <= size - kShardHeaderBytes) {
      head.assign(static_cast<size_t>(kShardHeaderBytes + metadata_bytes), '\0');
      read_all(head);
    }
  }
  ::close(fd);
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
  const std::optional<double> rate = info.entropy_rate;
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
  double bytes = 0;  // a sum of int64 counts from files: double cannot overflow
  for (const ShardInfo& info : shards_) {
    if (!info.text_bytes) return std::nullopt;
    bytes += static_cast<double>(*info.text_bytes);
  }
  return num_tokens() > 0 ? std::optional<double>(bytes / static_cast<double>(num_tokens()))
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

std::vector<std::string> split_shard_paths(const std::string& directory, Split split) {
  // `data prepare --shard-tokens` writes several shards per split, listed in manifest.json in
  // order; without a manifest (data synth, older prepares) a split is the one file train.bin.
  const std::filesystem::path manifest = std::filesystem::path(directory) / "manifest.json";
  std::error_code ec;
  if (!std::filesystem::exists(manifest, ec)) return {shard_path(directory, split)};
  const std::string origin = fmt::format("'{}'", manifest.string());
  const nlohmann::json m = parse_json(read_file(manifest.string()), origin);
  std::vector<std::string> paths;
  if (!m.is_object() || !m.contains("shards") || !m["shards"].is_array())
    throw Error(origin + " has no \"shards\" list; rerun 'trillion data prepare'");
  for (const nlohmann::json& s : m["shards"]) {
    if (!s.is_object() || !s.contains("file") || !s["file"].is_string() || !s.contains("split"))
      throw Error(origin +
                  ": a shard entry lacks \"file\" or \"split\"; rerun 'trillion data "
                  "prepare'");
    const std::string file = s["file"].get<std::string>();
    if (file.find('/') != std::string::npos || file.starts_with("."))
      throw Error(
          fmt::format("{}: shard file \"{}\" is not a plain name in the directory", origin, file));
    if (s["split"] == split_name(split))
      paths.push_back((std::filesystem::path(directory) / file).string());
  }
  if (paths.empty()) return {shard_path(directory, split)};
  return paths;
}

std::shared_ptr<TokenDataset> open_shard_dataset(const std::string& directory, Split split) {
  return std::make_shared<ShardDataset>(split_shard_paths(directory, split));
}

}  // namespace trillion::data
