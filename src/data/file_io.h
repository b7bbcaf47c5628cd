// File helpers for data: whole-file reads (gzip-transparent) and atomic writes. Invariant: a
// write either leaves the previous file untouched or replaces it with the complete new one
// (temp file in the same directory + fsync + rename + fsync of the directory), so a crash or a
// failed write never leaves a half-written shard or tokenizer behind.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

namespace trillion::data {

// Reads a whole file; a gzip file (".gz" or gzip magic) is decompressed on the fly (zlib).
// Throws a trillion::Error naming the path when it cannot be opened or read.
std::string read_file(const std::string& path);

// Writes the concatenation of `parts` to `path` atomically.
void write_file_atomic(const std::string& path, std::initializer_list<std::string_view> parts);

}  // namespace trillion::data
