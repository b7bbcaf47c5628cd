// See file_io.h. Gzip is decoded with zlib's inflate (not gzread, which reads a truncated file
// as a shorter one without an error and passes trailing garbage through) so every way a .gz can
// be damaged is detected and reported.
#include "data/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "data/unicode_classes.h"

namespace trillion::data {

bool is_gzip(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

void check_text(std::string_view text, const std::string& path) {
  size_t nul = 0, invalid = 0, first_nul = text.size(), first_invalid = text.size();
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_sequence_length(text, i);
    if (n == 0) {
      first_invalid = std::min(first_invalid, i);
      ++invalid;
      ++i;
      continue;
    }
    if (text[i] == '\0') {
      first_nul = std::min(first_nul, i);
      ++nul;
    }
    i += n;
  }
  const bool too_many_nul = nul * 1000 > text.size(), too_many_invalid = invalid * 10 > text.size();
  if (!too_many_nul && !too_many_invalid) return;
  const size_t at = too_many_nul ? first_nul : first_invalid;
  throw Error("'" + path + "' is not text: byte " + std::to_string(at) + " is " +
              (too_many_nul ? "a NUL byte" : "not UTF-8") + " (" + std::to_string(nul) +
              " NUL bytes and " + std::to_string(invalid) + " bytes that are not UTF-8 in " +
              std::to_string(text.size()) +
              "); pass UTF-8 text files (.gz allowed), not binaries or other archives, or convert "
              "the file to UTF-8 (e.g. with iconv)");
}

std::string write_error_hint(int error) {
  if (error == EFBIG) return " (the file size limit, see 'ulimit -f', is too small for it)";
  if (error == ENOSPC) return " (the disk is full)";
  if (error == EDQUOT) return " (the disk quota is exhausted)";
  return "";
}

std::string gunzip(std::string_view compressed, const std::string& origin, size_t max_bytes) {
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {  // 16: expect a gzip header and trailer
    throw Error("cannot decompress '" + origin + "': zlib could not start (out of memory?)");
  }
  struct End {
    z_stream* zs;
    ~End() { inflateEnd(zs); }
  } end{&zs};
  auto fail = [&](const std::string& what) -> Error {
    return Error("cannot read '" + origin + "': " + what +
                 "; the gzip file is damaged, re-create or re-download it");
  };
  const auto* data = reinterpret_cast<const Bytef*>(compressed.data());
  size_t fed = 0;  // bytes of `compressed` handed to zlib so far
  std::string out;
  unsigned char buffer[1 << 16];
  for (;;) {  // one gzip member per iteration
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
      if (zs.avail_in == 0 && fed < compressed.size()) {
        const size_t chunk = std::min<size_t>(compressed.size() - fed, UINT_MAX / 2);
        zs.next_in = const_cast<Bytef*>(data + fed);
        zs.avail_in = static_cast<uInt>(chunk);
        fed += chunk;
      }
      zs.next_out = buffer;
      zs.avail_out = sizeof buffer;
      rc = inflate(&zs, Z_NO_FLUSH);
      if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT || rc == Z_STREAM_ERROR) {
        const size_t at = fed - zs.avail_in;
        throw fail(std::string("corrupt gzip data near byte ") + std::to_string(at) + " (" +
                   (zs.msg != nullptr ? zs.msg : "invalid stream") + ")");
      }
      if (rc == Z_MEM_ERROR) throw fail("zlib ran out of memory");
      const size_t produced = sizeof buffer - zs.avail_out;
      if (produced > max_bytes - out.size()) {
        throw Error("cannot read '" + origin + "': it decompresses to more than " +
                    std::to_string(max_bytes) + " bytes");
      }
      out.append(reinterpret_cast<const char*>(buffer), produced);
      // Output space is always offered, so no progress means the input ran out mid-stream.
      if (rc == Z_BUF_ERROR) {
        throw fail("truncated: the file ends after " + std::to_string(compressed.size()) +
                   " bytes, before the end of its gzip stream");
      }
    }
    const size_t member_end = fed - zs.avail_in;
    if (member_end == compressed.size()) return out;
    if (!is_gzip(compressed.substr(member_end))) {
      throw fail(std::to_string(compressed.size() - member_end) +
                 " bytes of non-gzip data follow the gzip stream (which ends at byte " +
                 std::to_string(member_end) + ")");
    }
    inflateReset(&zs);  // another member: gzip(1) reads concatenated members as one file
  }
}

std::string non_regular_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

std::string read_file_raw(const std::string& path, size_t max_bytes) {
  // O_NONBLOCK: opening a FIFO would otherwise wait forever for a writer (and a trainer blocked
  // in open() never sees its stop signals); only regular files are read.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) throw Error("file '" + path + "' does not exist; check the path");
    throw Error("cannot open '" + path + "': " + std::strerror(errno));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw Error("cannot read '" + path + "': it is a directory; pass a file");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error("cannot read '" + path + "': it is " + non_regular_kind(st.st_mode) +
                ", not a regular file; pass a file");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::string raw;
  if (S_ISREG(st.st_mode)) raw.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string reason = std::strerror(errno);
      ::close(fd);
      throw Error("cannot read '" + path + "': " + reason);
    }
    if (n == 0) break;
    if (static_cast<size_t>(n) > max_bytes - raw.size()) {
      ::close(fd);
      throw Error("cannot read '" + path + "': it is larger than " + std::to_string(max_bytes) +
                  " bytes");
    }
    raw.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return raw;
}

bool visit_lines_backwards(
    const std::string& path,
    const std::function<bool(std::string_view line, uint64_t offset, bool terminated)>& visit) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    throw Error("cannot open '" + path + "': " + std::strerror(errno));
  }
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_at_end{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error("cannot read '" + path + "': " + std::strerror(errno));
  const off_t size = st.st_size;
  std::string tail;  // the file's bytes [loaded, size)
  off_t loaded = size;
  auto byte = [&](off_t at) {
    while (at < loaded) {
      const off_t from =
          std::max<off_t>(0, loaded - std::max<off_t>(off_t{1} << 16, size - loaded));
      std::string chunk(static_cast<size_t>(loaded - from), '\0');
      size_t got = 0;
      while (got < chunk.size()) {
        const ssize_t n =
            ::pread(fd, chunk.data() + got, chunk.size() - got, from + static_cast<off_t>(got));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          throw Error("cannot read '" + path +
                      "': " + (n < 0 ? std::strerror(errno) : "it shrank while being read"));
        }
        got += static_cast<size_t>(n);
      }
      tail.insert(0, chunk);
      loaded = from;
    }
    return tail[static_cast<size_t>(at - loaded)];
  };
  for (off_t end = size; end > 0;) {
    const bool terminated = byte(end - 1) == '\n';
    const off_t content_end = terminated ? end - 1 : end;
    off_t start = content_end;
    while (start > 0 && byte(start - 1) != '\n') --start;
    const std::string_view line(tail.data() + (start - loaded),
                                static_cast<size_t>(content_end - start));
    if (!visit(line, static_cast<uint64_t>(start), terminated)) break;
    end = start;
  }
  return true;
}

std::string read_file(const std::string& path, size_t max_bytes) {
  std::string raw = read_file_raw(path, max_bytes);
  return is_gzip(raw) ? gunzip(raw, path, max_bytes) : raw;
}

void write_file_atomic(const std::string& path, std::initializer_list<std::string_view> parts) {
  namespace fs = std::filesystem;
  fs::path target(path);
  fs::path directory = target.has_parent_path() ? target.parent_path() : fs::path(".");
  if (!fs::is_directory(directory)) {
    throw Error("cannot write '" + path + "': directory '" + directory.string() +
                "' does not exist; create it first");
  }
  std::string temp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw Error("cannot create '" + temp + "': " + std::strerror(errno));
  auto fail = [&](const char* what) {
    const int error = errno;
    std::string message = std::string("cannot ") + what + " '" + temp +
                          "': " + std::strerror(error) + write_error_hint(error);
    ::close(fd);
    ::unlink(temp.c_str());
    throw Error(message + " ('" + path + "' was left unchanged)");
  };
  for (std::string_view part : parts) {
    const char* data = part.data();
    size_t left = part.size();
    while (left > 0) {
      ssize_t n = ::write(fd, data, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("write");
      data += n;
      left -= static_cast<size_t>(n);
    }
  }
  if (::fsync(fd) != 0) fail("fsync");
  if (::close(fd) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    throw Error("cannot close '" + temp + "': " + std::strerror(error) + write_error_hint(error));
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    std::string message = std::strerror(errno);
    ::unlink(temp.c_str());
    throw Error("cannot rename '" + temp + "' to '" + path + "': " + message);
  }
  int dir_fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);  // makes the rename durable; best effort on filesystems that refuse
    ::close(dir_fd);
  }
}

}  // namespace trillion::data
