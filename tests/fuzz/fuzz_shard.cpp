// Fuzz target: the token-shard reader (header, metadata, tokens), through the real file path
// (an in-memory file: memfd + /proc/self/fd). The first input byte chooses which checksums are
// fixed up before reading (bit 0: header, bit 1: metadata, bit 2: tokens), so mutations reach
// the size and field checks behind the checksums, as a crafted file would. Properties: an
// accepted shard's header agrees with the file size and every token it yields is < its vocab.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/error.h"
#include "data/shard.h"
#include "fuzz_target.h"

namespace {

template <typename T>
T load(const std::string& bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

template <typename T>
void store(std::string& bytes, size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

void fix_checksums(std::string& file, unsigned mode) {
  if (file.size() < 64) return;
  const int64_t m = load<int64_t>(file, 32);
  const bool metadata_fits = m >= 0 && m <= static_cast<int64_t>(file.size()) - 64;
  if ((mode & 2) && metadata_fits) store<uint64_t>(file, 48, XXH64(file.data() + 64, m, 0));
  if ((mode & 4) && metadata_fits) {
    const size_t offset = static_cast<size_t>((64 + m + 63) / 64 * 64);
    if (offset <= file.size()) {
      store<uint64_t>(file, 40, XXH64(file.data() + offset, file.size() - offset, 0));
    }
  }
  if (mode & 1) store<uint64_t>(file, 56, XXH64(file.data(), 56, 0));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trillion;
  if (size == 0) return 0;
  static const int fd = ::memfd_create("fuzz-shard", 0);
  fuzz::fuzz_require(fd >= 0, "memfd_create works");
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  std::string file(reinterpret_cast<const char*>(data) + 1, size - 1);
  fix_checksums(file, data[0]);
  fuzz::fuzz_require(::ftruncate(fd, 0) == 0, "ftruncate");
  fuzz::fuzz_require(::pwrite(fd, file.data(), file.size(), 0) == static_cast<ssize_t>(file.size()),
                     "pwrite");
  try {
    const data::ShardInfo info = data::read_shard_info(path);
    fuzz::fuzz_require(
        info.data_offset + info.num_tokens * info.token_bytes == static_cast<int64_t>(file.size()),
        "header sizes agree with the file size");
    const data::ShardDataset shards({path});
    std::vector<int32_t> tokens(static_cast<size_t>(shards.num_tokens()));
    if (!tokens.empty()) shards.read_tokens(0, 0, shards.num_tokens(), tokens.data());
    for (int32_t t : tokens) {
      fuzz::fuzz_require(t >= 0 && t < shards.vocab_size(), "tokens are < vocab");
    }
    (void)shards.bytes_per_token();
    (void)shards.describe();
  } catch (const Error&) {
  }
  return 0;
}
