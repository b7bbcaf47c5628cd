// Fuzz target: the tokenizer file reader (JSON text -> Tokenizer). Property: an accepted
// tokenizer decodes its own encoding of any bytes to the same bytes.
#include <string>

#include "core/error.h"
#include "data/tokenizer.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trillion;
  try {
    const data::Tokenizer tokenizer = data::Tokenizer::from_json(fuzz::as_text(data, size), "fuzz");
    const std::string sample = "The quick brown fox, 1234 \xff\xfe\n  jumps!";
    const std::vector<int32_t> ids = tokenizer.encode(sample);
    fuzz::fuzz_require(tokenizer.decode(ids) == sample, "decode(encode(x)) == x");
  } catch (const Error&) {
  }
  return 0;
}
