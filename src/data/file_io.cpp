// See file_io.h. gzread passes non-gzip files through unchanged, so one code path reads both.
#include "data/file_io.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace trillion::data {

std::string read_file(const std::string& path) {
  if (!std::filesystem::exists(path)) {
    throw Error("file '" + path + "' does not exist; check the path");
  }
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    throw Error("cannot open '" + path + "': " + std::strerror(errno));
  }
  gzbuffer(file, 1 << 20);
  std::string text;
  char buffer[1 << 16];
  for (;;) {
    int n = gzread(file, buffer, sizeof(buffer));
    if (n < 0) {
      int code = 0;
      std::string message = gzerror(file, &code);
      gzclose(file);
      throw Error("cannot read '" + path + "': " + message + " (corrupt gzip file?)");
    }
    if (n == 0) break;
    text.append(buffer, n);
  }
  gzclose(file);
  return text;
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
    std::string message =
        std::string("cannot ") + what + " '" + temp + "': " + std::strerror(errno);
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
    ::unlink(temp.c_str());
    throw Error("cannot close '" + temp + "': " + std::strerror(errno));
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
