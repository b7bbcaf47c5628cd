// A file read in blocks, decompressed on the fly when it is gzip (zlib) or zstd (libzstd), told
// apart by magic bytes (1f 8b, 28 b5 2f fd), whatever its name. Invariants: memory is bounded by
// the block size, whatever the file size; a damaged or truncated stream, or bytes after the
// last gzip member, is an Error naming the file, never a shorter text; concatenated gzip members
// and zstd frames read as one stream, as gzip(1) and zstd(1) read them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace trillion::data {

class ByteSource {
 public:
  explicit ByteSource(const std::string& path);
  ~ByteSource();
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  // Appends up to `max_bytes` decompressed bytes to `out`; returns false (appending nothing)
  // once the stream has ended.
  bool read(std::string& out, size_t max_bytes);
  // Bytes of the file read so far (compressed bytes for .gz and .zst): progress against size().
  int64_t consumed() const { return consumed_; }
  int64_t size() const { return size_; }
  // "text", "gzip" or "zstd".
  const char* compression() const;

 private:
  bool fill();  // reads the next block of the file into in_; false at the end of the file
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0, consumed_ = 0;
  std::string in_;
  size_t in_pos_ = 0;
  bool file_end_ = false, stream_end_ = false;
  struct Decoder;
  std::unique_ptr<Decoder> decoder_;
};

}  // namespace trillion::data
