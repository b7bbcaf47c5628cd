// See document_reader.h.
#include "data/document_reader.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_fields.h"
#include "data/file_io.h"
#include "data/unicode_classes.h"

namespace trillion::data {

namespace fs = std::filesystem;

namespace {
constexpr size_t kReadBlock = 1 << 20;
}

std::vector<std::string> expand_input_paths(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const std::string& path : paths) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      std::vector<std::string> found;
      for (auto it = fs::recursive_directory_iterator(path, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (it->is_regular_file(ec)) found.push_back(it->path().string());
      }
      if (ec) throw Error("cannot list directory '" + path + "': " + ec.message());
      if (found.empty())
        throw Error("directory '" + path +
                    "' holds no files; pass a directory of text, "
                    "JSON-lines, .gz or .zst files");
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::exists(path, ec)) {
      files.push_back(path);
    } else {
      throw Error("input '" + path + "' does not exist; pass files or directories to prepare");
    }
  }
  return files;
}

DocumentReader::DocumentReader(std::vector<std::string> files, DocumentFormat format)
    : files_(std::move(files)), format_(std::move(format)) {
  separator_ = format_.format == InputFormat::kJsonl ? "\n" : format_.separator;
  for (const std::string& f : files_) {
    std::error_code ec;
    const auto size = fs::file_size(f, ec);
    if (!ec) total_bytes_ += static_cast<int64_t>(size);
  }
}

DocumentReader::~DocumentReader() = default;

int64_t DocumentReader::consumed_bytes() const {
  return done_bytes_ + (source_ ? source_->consumed() : 0);
}

bool DocumentReader::open_next_file() {
  if (source_) {
    done_bytes_ += source_->consumed();
    source_.reset();
    ++file_;
  }
  if (file_ >= files_.size()) return false;
  source_ = std::make_unique<ByteSource>(files_[file_]);
  compressions_.push_back(source_->compression());
  buffer_.clear();
  pos_ = scan_from_ = 0;
  line_ = 1;
  checked_text_ = false;
  file_eof_ = false;
  return true;
}

bool DocumentReader::next(RawRecord& record) {
  while (true) {
    if (!source_ && !open_next_file()) return false;
    const size_t at = separator_.empty() ? std::string::npos : buffer_.find(separator_, scan_from_);
    if (at != std::string::npos || (file_eof_ && pos_ < buffer_.size())) {
      const size_t end = at != std::string::npos ? at : buffer_.size();
      const size_t consumed = at != std::string::npos ? end + separator_.size() : end;
      const std::string_view piece(buffer_.data() + pos_, end - pos_);
      const int64_t start_line = line_;
      line_ += std::count(buffer_.begin() + static_cast<std::ptrdiff_t>(pos_),
                          buffer_.begin() + static_cast<std::ptrdiff_t>(consumed), '\n');
      // Text documents are kept byte for byte (only empty ones dropped); blank JSON lines skipped.
      const bool empty = format_.format == InputFormat::kText
                             ? piece.empty()
                             : piece.find_first_not_of(" \t\r\n") == std::string_view::npos;
      if (!empty) {
        record.bytes.assign(piece);
        record.file = static_cast<uint32_t>(file_);
        record.line = start_line;
      }
      pos_ = scan_from_ = consumed;
      if (!empty) return true;
      continue;
    }
    if (file_eof_) {
      open_next_file();
      if (!source_) return false;
      continue;
    }
    // Keep the unfinished record and read the next block. find() failed from scan_from_, so a
    // separator can only start in the last separator_.size() - 1 bytes read so far.
    buffer_.erase(0, pos_);
    const size_t overlap = separator_.empty() ? 0 : separator_.size() - 1;
    scan_from_ = buffer_.size() > overlap ? buffer_.size() - overlap : 0;
    pos_ = 0;
    const size_t before = buffer_.size();
    if (!source_->read(buffer_, kReadBlock)) {
      file_eof_ = true;
      continue;
    }
    if (!checked_text_ && format_.format == InputFormat::kText) {
      check_text(std::string_view(buffer_).substr(before), files_[file_]);
      checked_text_ = true;
    }
  }
}

RecordStatus parse_record(const DocumentFormat& format, std::string& bytes, std::string& text,
                          std::string& reason) {
  if (format.format == InputFormat::kText) {
    text = std::move(bytes);
    return text.empty() ? RecordStatus::kEmpty : RecordStatus::kDocument;
  }
  const size_t invalid = first_invalid_utf8(bytes);
  if (invalid != bytes.size()) {
    reason = "invalid UTF-8 at byte " + std::to_string(invalid) + " of the line";
    return RecordStatus::kBad;
  }
  nlohmann::json j = nlohmann::json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    reason = "invalid JSON";
    return RecordStatus::kBad;
  }
  if (!j.is_object()) {
    reason = "the line is " + json_kind(j) + ", not a JSON object";
    return RecordStatus::kBad;
  }
  auto it = j.find(format.text_key);
  if (it == j.end()) {
    reason = "no \"" + format.text_key + "\" field (choose the field with --text-key)";
    return RecordStatus::kBad;
  }
  if (!it->is_string()) {
    reason = "field \"" + format.text_key + "\" is " + json_kind(*it) + ", not a string";
    return RecordStatus::kBad;
  }
  text = std::move(it->get_ref<std::string&>());
  return text.empty() ? RecordStatus::kEmpty : RecordStatus::kDocument;
}

}  // namespace trillion::data
