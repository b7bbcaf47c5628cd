// GPT-2's byte-level alphabet (bytes_to_unicode): each byte is one printable character, so
// byte-level BPE tokens can be written as strings in tokenizer.json and GGUF. Printable Latin-1
// bytes stand for themselves; the other 68 map in order to U+0100.... Invariant:
// byte_level_decode(byte_level_string(b)) == b for every byte string b.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace trillion::data {

uint32_t byte_level_code_point(unsigned char b);
std::string byte_level_char(unsigned char b);  // as UTF-8
std::string byte_level_string(std::string_view bytes);
// The bytes a byte-level string stands for; nullopt when a character is outside the alphabet.
std::optional<std::string> byte_level_decode(std::string_view text);

}  // namespace trillion::data
