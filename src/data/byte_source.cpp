// See byte_source.h. Gzip goes through zlib's inflate (windowBits 15 + 16: gzip only, CRC-32 and
// length checked per member), zstd through ZSTD_decompressStream.
#include "data/byte_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "data/file_io.h"

namespace trillion::data {

namespace {
constexpr size_t kBlockBytes = 1 << 20;
enum class Compression { kNone, kGzip, kZstd };
}  // namespace

struct ByteSource::Decoder {
  Compression kind = Compression::kNone;
  z_stream z{};
  bool z_open = false;
  bool member_done = false;  // gzip: the last member ended exactly here
  ZSTD_DStream* zstd = nullptr;
  size_t zstd_last = 0;  // ZSTD_decompressStream's last return: 0 at a frame's end
  ~Decoder() {
    if (z_open) inflateEnd(&z);
    if (zstd) ZSTD_freeDStream(zstd);
  }
};

ByteSource::ByteSource(const std::string& path) : path_(path), decoder_(new Decoder) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK);
  if (fd_ < 0) throw Error("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string kind = ::fstat(fd_, &st) == 0 ? non_regular_kind(st.st_mode) : "unreadable";
    ::close(fd_);
    throw Error("'" + path + "' is " + kind + ", not a regular file; pass text, JSON-lines, .gz " +
                "or .zst files, or directories of them");
  }
  size_ = st.st_size;
  fill();
  auto byte = [&](size_t i) { return i < in_.size() ? static_cast<unsigned char>(in_[i]) : 0; };
  if (byte(0) == 0x1f && byte(1) == 0x8b) {
    decoder_->kind = Compression::kGzip;
    if (inflateInit2(&decoder_->z, 15 + 16) != Z_OK) throw Error("zlib: inflateInit2 failed");
    decoder_->z_open = true;
  } else if (byte(0) == 0x28 && byte(1) == 0xb5 && byte(2) == 0x2f && byte(3) == 0xfd) {
    decoder_->kind = Compression::kZstd;
    decoder_->zstd = ZSTD_createDStream();
    if (!decoder_->zstd) throw Error("zstd: ZSTD_createDStream failed");
  }
}

ByteSource::~ByteSource() {
  if (fd_ >= 0) ::close(fd_);
}

const char* ByteSource::compression() const {
  switch (decoder_->kind) {
    case Compression::kGzip:
      return "gzip";
    case Compression::kZstd:
      return "zstd";
    default:
      return "text";
  }
}

bool ByteSource::fill() {
  if (file_end_) return false;
  in_.erase(0, in_pos_);
  in_pos_ = 0;
  const size_t old = in_.size();
  in_.resize(old + kBlockBytes);
  ssize_t n;
  do {
    n = ::read(fd_, in_.data() + old, kBlockBytes);
  } while (n < 0 && errno == EINTR);
  if (n < 0) throw Error("cannot read '" + path_ + "': " + std::strerror(errno));
  in_.resize(old + static_cast<size_t>(n));
  consumed_ += n;
  if (n == 0) file_end_ = true;
  return n > 0;
}

bool ByteSource::read(std::string& out, size_t max_bytes) {
  if (stream_end_) return false;
  Decoder& d = *decoder_;
  const size_t start = out.size();
  if (d.kind == Compression::kNone) {
    if (in_pos_ == in_.size() && !fill()) {
      stream_end_ = true;
      return false;
    }
    const size_t n = std::min(max_bytes, in_.size() - in_pos_);
    out.append(in_, in_pos_, n);
    in_pos_ += n;
    return true;
  }
  out.resize(start + max_bytes);
  size_t produced = 0;
  while (produced == 0) {
    if (in_pos_ == in_.size() && !fill()) {
      // The file ended: fine only right after a complete gzip member or zstd frame.
      const bool complete = d.kind == Compression::kGzip ? d.member_done : d.zstd_last == 0;
      if (!complete) {
        throw Error("'" + path_ + "' is truncated: its " + compression() +
                    " stream ends early; the file is damaged or was cut off (re-download or "
                    "recompress it)");
      }
      stream_end_ = true;
      out.resize(start);
      return false;
    }
    const size_t avail = in_.size() - in_pos_;
    if (d.kind == Compression::kGzip) {
      if (d.member_done) {  // another member follows: gzip reads concatenated members as one
        inflateReset(&d.z);
        d.member_done = false;
      }
      d.z.next_in = reinterpret_cast<Bytef*>(in_.data() + in_pos_);
      d.z.avail_in = static_cast<uInt>(std::min<size_t>(avail, UINT32_MAX));
      d.z.next_out = reinterpret_cast<Bytef*>(out.data() + start + produced);
      d.z.avail_out = static_cast<uInt>(max_bytes - produced);
      const int rc = inflate(&d.z, Z_NO_FLUSH);
      in_pos_ = static_cast<size_t>(reinterpret_cast<char*>(d.z.next_in) - in_.data());
      produced = max_bytes - d.z.avail_out;
      if (rc == Z_STREAM_END) {
        d.member_done = true;
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        throw Error("'" + path_ + "' is not a valid gzip stream (" +
                    (d.z.msg ? d.z.msg : "zlib error " + std::to_string(rc)) +
                    ", after the first " + std::to_string(consumed_) +
                    " bytes read); the file is damaged, or has bytes after its last member");
      }
    } else {
      ZSTD_inBuffer in{in_.data() + in_pos_, avail, 0};
      ZSTD_outBuffer o{out.data() + start + produced, max_bytes - produced, 0};
      const size_t rc = ZSTD_decompressStream(d.zstd, &o, &in);
      if (ZSTD_isError(rc)) {
        throw Error("'" + path_ + "' is not a valid zstd stream (" + ZSTD_getErrorName(rc) +
                    "); the file is damaged, or has bytes after its last frame");
      }
      d.zstd_last = rc;
      in_pos_ += in.pos;
      produced += o.pos;
    }
  }
  out.resize(start + produced);
  return true;
}

}  // namespace trillion::data
