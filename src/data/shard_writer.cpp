// See shard_writer.h.
#include "data/shard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/error.h"
#include "data/file_io.h"
#include "data/shard.h"

namespace trillion::data {

namespace {
constexpr char kMagic[8] = {'T', 'R', 'L', 'T', 'O', 'K', 'S', '\0'};
constexpr size_t kFlushBytes = 4 << 20;

template <typename T>
void store(char* bytes, T value) {
  std::memcpy(bytes, &value, sizeof(T));
}

void write_all(int fd, const char* data, size_t size, off_t offset, const std::string& path) {
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, data, size, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = errno;
      throw Error("cannot write '" + path + "': " + std::strerror(error) + write_error_hint(error));
    }
    data += n;
    size -= static_cast<size_t>(n);
    offset += n;
  }
}

int64_t data_offset(int64_t metadata_bytes) {
  return (kShardHeaderBytes + metadata_bytes + 63) / 64 * 64;
}
}  // namespace

ShardWriter::ShardWriter(std::string path, int64_t vocab_size, int64_t metadata_bytes)
    : path_(std::move(path)),
      vocab_size_(vocab_size),
      metadata_bytes_(metadata_bytes),
      token_bytes_(vocab_size <= 65536 ? 2 : 4),
      hash_state_(XXH64_createState()) {
  TRILLION_CHECK(vocab_size >= 1 && vocab_size <= (int64_t{1} << 31), "shard vocab size range");
  XXH64_reset(static_cast<XXH64_state_t*>(hash_state_), 0);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd_ < 0) throw Error("cannot create '" + path_ + "': " + std::strerror(errno));
}

ShardWriter::~ShardWriter() {
  XXH64_freeState(static_cast<XXH64_state_t*>(hash_state_));
  if (fd_ >= 0) ::close(fd_);
  if (!finished_) ::unlink(path_.c_str());
}

void ShardWriter::flush() {
  if (buffer_.empty()) return;
  XXH64_update(static_cast<XXH64_state_t*>(hash_state_), buffer_.data(), buffer_.size());
  const off_t offset = data_offset(metadata_bytes_) +
                       (tokens_ * token_bytes_ - static_cast<int64_t>(buffer_.size()));
  write_all(fd_, buffer_.data(), buffer_.size(), offset, path_);
  buffer_.clear();
}

void ShardWriter::append(std::span<const int32_t> tokens) {
  for (int32_t id : tokens) {
    if (id < 0 || id >= vocab_size_) {
      throw Error("cannot write shard '" + path_ + "': token " + std::to_string(tokens_) +
                  " has id " + std::to_string(id) + ", not in [0, vocab size " +
                  std::to_string(vocab_size_) + "); check the tokenizer's vocab size");
    }
    char bytes[4];
    if (token_bytes_ == 2) {
      store(bytes, static_cast<uint16_t>(id));
    } else {
      store(bytes, static_cast<uint32_t>(id));
    }
    buffer_.append(bytes, token_bytes_);
    ++tokens_;
  }
  if (buffer_.size() >= kFlushBytes) flush();
}

void ShardWriter::finish(const nlohmann::json& metadata) {
  flush();
  std::string meta = metadata.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (static_cast<int64_t>(meta.size()) > metadata_bytes_) {
    throw Error("shard '" + path_ + "': metadata of " + std::to_string(meta.size()) +
                " bytes exceeds the " + std::to_string(metadata_bytes_) + " reserved for it");
  }
  meta.resize(metadata_bytes_, ' ');
  std::string header(data_offset(metadata_bytes_), '\0');
  std::memcpy(header.data(), kMagic, 8);
  store(&header[8], kShardFormatVersion);
  store(&header[12], token_bytes_);
  store(&header[16], vocab_size_);
  store(&header[24], tokens_);
  store(&header[32], metadata_bytes_);
  store(&header[40], static_cast<uint64_t>(XXH64_digest(static_cast<XXH64_state_t*>(hash_state_))));
  store(&header[48], static_cast<uint64_t>(XXH64(meta.data(), meta.size(), 0)));
  store(&header[56], static_cast<uint64_t>(XXH64(header.data(), 56, 0)));
  std::memcpy(&header[kShardHeaderBytes], meta.data(), meta.size());
  write_all(fd_, header.data(), header.size(), 0, path_);
  if (::ftruncate(fd_, data_offset(metadata_bytes_) + tokens_ * token_bytes_) != 0 ||
      ::fsync(fd_) != 0) {
    throw Error("cannot write '" + path_ + "': " + std::strerror(errno));
  }
  if (::close(fd_) != 0) throw Error("cannot close '" + path_ + "': " + std::strerror(errno));
  fd_ = -1;
  finished_ = true;
}

}  // namespace trillion::data
