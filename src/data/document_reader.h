// The document stream of `trillion data prepare`: input paths (files, and directories walked
// recursively in sorted order) read one after another through ByteSource (text, .gz, .zst), cut
// into raw records — a document of a text file (between separators), or a line of a JSON-lines
// file — with the file and line each starts at. Parsing a record into a document's text is
// parse_record's, so workers can do it in parallel. Invariants: records come in input order; memory
// is one read block plus the longest record; a text file whose first block is not text (a
// binary) is an Error naming it, as data/file_io.h's check_text says.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/byte_source.h"

namespace trillion::data {

enum class InputFormat { kText, kJsonl };

struct DocumentFormat {
  InputFormat format = InputFormat::kText;
  std::string separator = "\n\n";  // text: documents are separated by this (empty: one per file)
  std::string text_key = "text";   // jsonl: the field that holds a document's text
};

struct RawRecord {
  std::string bytes;
  uint32_t file = 0;  // index into DocumentReader::files()
  int64_t line = 0;   // 1-based line where the record starts
};

// Regular files under `paths` (a directory contributes its files, recursively, sorted by path);
// an Error names a path that does not exist, or a directory with no files.
std::vector<std::string> expand_input_paths(const std::vector<std::string>& paths);

class DocumentReader {
 public:
  DocumentReader(std::vector<std::string> files, DocumentFormat format);
  ~DocumentReader();

  // The next non-empty record; false after the last file.
  bool next(RawRecord& record);
  const std::vector<std::string>& files() const { return files_; }
  // Bytes of the files read so far and in all (as stored: compressed for .gz and .zst).
  int64_t consumed_bytes() const;
  int64_t total_bytes() const { return total_bytes_; }
  // The compression of each file opened so far ("text", "gzip", "zstd"; "" before it opens).
  const std::vector<std::string>& compressions() const { return compressions_; }

 private:
  bool open_next_file();
  std::vector<std::string> files_;
  DocumentFormat format_;
  std::string separator_;
  std::unique_ptr<ByteSource> source_;
  size_t file_ = 0;
  bool checked_text_ = false, file_eof_ = false;
  std::string buffer_;
  size_t pos_ = 0, scan_from_ = 0;
  int64_t line_ = 1, done_bytes_ = 0, total_bytes_ = 0;
  std::vector<std::string> compressions_;
};

// What parse_record found.
enum class RecordStatus { kDocument, kEmpty, kBad };
// Turns a record into its document text (moved out of record.bytes for text), or says why it is
// bad: a JSON line that is not valid UTF-8, not JSON, not an object, lacks the text field, or
// whose field is not a string. `reason` is set for kBad.
RecordStatus parse_record(const DocumentFormat& format, std::string& bytes, std::string& text,
                          std::string& reason);

}  // namespace trillion::data
