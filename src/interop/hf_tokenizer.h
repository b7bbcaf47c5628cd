// A trillion BPE tokenizer as a Hugging Face tokenizers `tokenizer.json`: model BPE over the GPT-2
// byte-to-unicode alphabet (every byte is one printable character, so byte-level tokens are
// strings), vocab = token string -> id, merges "left right" in trillion's merge order (= rank),
// pre-tokenizer = Split on the regex of data/pretokenize.h (its byte classes written as ASCII
// ranges, non-ASCII counted as letters) then ByteLevel without its own regex, decoder ByteLevel,
// and the specials <|bos|>, <|eos|>, <|pad|> as added tokens. Not reproduced: the 256-byte chunk
// cap of data/pretokenize.h (only runs longer than 256 bytes split differently).
#pragma once

#include <string>

#include "data/tokenizer.h"

namespace trillion::interop {

// GPT-2's bytes_to_unicode: the printable character (as UTF-8) that byte b stands for.
std::string byte_level_char(unsigned char b);
// A token's bytes spelled in that alphabet.
std::string byte_level_string(const std::string& bytes);

std::string hf_tokenizer_json(const data::Tokenizer& tokenizer);

}  // namespace trillion::interop
