// A trillion BPE tokenizer as a Hugging Face tokenizers `tokenizer.json`: model BPE over the GPT-2
// byte-to-unicode alphabet (every byte is one printable character, so byte-level tokens are
// strings), vocab = token string -> id, merges "left right" in trillion's merge order (= rank),
// pre-tokenizer = Split on the regex of data/pretokenize.h (its byte classes written as ASCII
// ranges, non-ASCII counted as letters) then ByteLevel without its own regex, decoder ByteLevel,
// and the specials <|bos|>, <|eos|>, <|pad|> as added tokens. Not reproduced: the 256-byte chunk
// cap of data/pretokenize.h (only runs longer than 256 bytes split differently).
#pragma once

#include <optional>
#include <string>

#include "data/ranked_bpe.h"
#include "data/tokenizer.h"

namespace trillion::interop {

// GPT-2's bytes_to_unicode: the printable character (as UTF-8) that byte b stands for.
std::string byte_level_char(unsigned char b);
// A token's bytes spelled in that alphabet.
std::string byte_level_string(const std::string& bytes);

std::string hf_tokenizer_json(const data::Tokenizer& tokenizer);

// A RankedBpe as tokenizer.json: vocab from its tokens' bytes in the byte-level alphabet, merges
// from merge_list() (for tiktoken ranks: every split of a token, as Hugging Face converts them),
// the pre-tokenizer of its regex, specials as added tokens.
std::string hf_tokenizer_json(const data::RankedBpe& tokenizer);

// The tokenizer.json an export writes for the tokenizer file at `path` (any format trillion
// reads): a tokenizer.json is copied as it is (decompressed if it is a .gz), the others are
// converted. `vocab_size`, `bos` and `eos` are set from the tokenizer.
struct ExportedTokenizer {
  std::string json;
  int vocab_size = 0;
  std::optional<int> bos, eos;
};
ExportedTokenizer export_tokenizer_json(const std::string& path);

}  // namespace trillion::interop
