// Fuzz target: the gzip reader. Bytes that do not decompress must be an Error, never a shorter
// text or a crash; properties: output stays within the size limit, and the input compressed by
// zlib decompresses back to itself (the success path sees arbitrary contents too).
#include <zlib.h>

#include <string>

#include "core/error.h"
#include "data/file_io.h"
#include "fuzz_target.h"

namespace {
constexpr size_t kMaxOutput = size_t{1} << 24;

std::string gzip_compress(std::string_view text) {
  z_stream zs{};
  deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&zs, text.size()) + 32, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  zs.avail_in = static_cast<uInt>(text.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  trillion::fuzz::fuzz_require(rc == Z_STREAM_END, "zlib compresses the input");
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trillion;
  const std::string_view input = fuzz::as_text(data, size);
  try {
    const std::string out = data::gunzip(input, "fuzz.gz", kMaxOutput);
    fuzz::fuzz_require(out.size() <= kMaxOutput, "output within the limit");
  } catch (const Error&) {
  }
  const std::string compressed = gzip_compress(input);
  fuzz::fuzz_require(data::gunzip(compressed, "round-trip.gz") == input, "gunzip(gzip(x)) == x");
  return 0;
}
