// File helpers for data: whole-file reads (gzip-transparent) and atomic writes. Invariants: a
// write either leaves the previous file untouched or replaces it with the complete new one
// (temp file in the same directory + fsync + rename + fsync of the directory), so a crash or a
// failed write never leaves a half-written shard or tokenizer behind; a gzip file is either
// decompressed completely (every member's CRC-32 and length checked, nothing after the last
// member) or is an Error — a truncated or damaged .gz is never read as a shorter text.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>

namespace trillion::data {

constexpr size_t kNoSizeLimit = std::numeric_limits<size_t>::max();

// Reads a whole file; a file that starts with the gzip magic bytes is decompressed (zlib; any
// other file, whatever its name, is returned as it is). Throws a trillion::Error naming the path
// when it cannot be opened or read, is not a regular file, or is a damaged gzip file.
std::string read_file(const std::string& path, size_t max_bytes = kNoSizeLimit);
// The file's bytes as they are (binary files: no gzip detection).
std::string read_file_raw(const std::string& path, size_t max_bytes = kNoSizeLimit);

// True when `bytes` starts with the gzip magic (1f 8b).
bool is_gzip(std::string_view bytes);

// Decompresses a gzip file's bytes (RFC 1952; concatenated members are one stream, as gzip(1)
// reads them). Throws an Error naming `origin` for a damaged or truncated stream, bytes after the
// last member, or output beyond `max_bytes` (a guard against decompression bombs).
std::string gunzip(std::string_view compressed, const std::string& origin,
                   size_t max_bytes = kNoSizeLimit);

// A hint for a failed write's errno: EFBIG (the file size limit, `ulimit -f`) and ENOSPC / EDQUOT
// (disk full, quota) name their cause; other errors get "".
std::string write_error_hint(int error);

// Writes the concatenation of `parts` to `path` atomically.
void write_file_atomic(const std::string& path, std::initializer_list<std::string_view> parts);

}  // namespace trillion::data
