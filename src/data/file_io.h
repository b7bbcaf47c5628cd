// File helpers for data: whole-file reads (gzip-transparent) and atomic writes. Invariants: a
// write either leaves the previous file untouched or replaces it with the complete new one
// (temp file in the same directory + fsync + rename + fsync of the directory), so a crash or a
// failed write never leaves a half-written shard or tokenizer behind; a gzip file is either
// decompressed completely (every member's CRC-32 and length checked, nothing after the last
// member) or is an Error — a truncated or damaged .gz is never read as a shorter text.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
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
// "a FIFO (named pipe)", "a socket", ...: what a path that is not a regular file is, for messages.
std::string non_regular_kind(mode_t mode);
// The file's bytes as they are (binary files: no gzip detection).
std::string read_file_raw(const std::string& path, size_t max_bytes = kNoSizeLimit);

// Calls visit(line, offset, terminated) for the lines of `path` from the last one backwards —
// `line` without its '\n', `offset` where it starts, `terminated` false only for a last line
// without a newline — until visit returns false, reading only as far back as that (in chunks
// that double, so a whole-file walk costs O(size)). For append-only logs whose tail is what a
// reader needs (a run's metrics.jsonl). Returns false, visiting nothing, when the file does not
// exist; throws an Error naming the path when it cannot be read.
bool visit_lines_backwards(
    const std::string& path,
    const std::function<bool(std::string_view line, uint64_t offset, bool terminated)>& visit);

// Throws an Error naming `path`, the byte offset of the first offending byte and the fix unless
// `text` looks like UTF-8 text: NUL bytes above 1 in 1000 (binaries and UTF-16 are full of them),
// or bytes that are not UTF-8 above 1 in 10 (what a binary, an archive or a non-UTF-8 encoding
// gives; a few stray Latin-1 bytes in a text pass). For inputs that are tokenized as text.
void check_text(std::string_view text, const std::string& path);

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
