// GPT-2's published tokenizer files (tests/data/fixtures/gpt2, see its PROVENANCE.md) turned into
// the two formats trillion reads — a Hugging Face tokenizer.json (what GPT-2's tokenizer.json on
// the Hub holds: vocab = encoder.json, merges = vocab.bpe, ByteLevel pre-tokenizer,
// <|endoftext|> added) and a tiktoken ranks file (token bytes -> id) — plus the reference
// encodings. Files are written once per process into a directory named after the branch and pid.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "data/byte_level.h"
#include "data/file_io.h"

namespace trillion::test {

inline std::string gpt2_fixture(const std::string& name) {
  return std::string(TRILLION_SOURCE_DIR) + "/tests/data/fixtures/gpt2/" + name;
}

inline std::string gpt2_work_dir() {
  static const std::string dir = [] {
    const auto d = std::filesystem::temp_directory_path() /
                   ("trillion-h37-ingest-gpt2-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d.string();
  }();
  return dir;
}

inline std::string base64(const std::string& bytes) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (static_cast<unsigned char>(bytes[i]) << 16) |
                       (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                       static_cast<unsigned char>(bytes[i + 2]);
    for (int s : {18, 12, 6, 0}) out += k[(v >> s) & 63];
  }
  if (i + 1 == bytes.size()) {
    const uint32_t v = static_cast<unsigned char>(bytes[i]) << 16;
    out += k[(v >> 18) & 63];
    out += k[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    const uint32_t v = (static_cast<unsigned char>(bytes[i]) << 16) |
                       (static_cast<unsigned char>(bytes[i + 1]) << 8);
    for (int s : {18, 12, 6}) out += k[(v >> s) & 63];
    out += '=';
  }
  return out;
}

inline const nlohmann::json& gpt2_encoder() {
  static const nlohmann::json j =
      nlohmann::json::parse(data::read_file(gpt2_fixture("encoder.json.gz")));
  return j;
}

// GPT-2's tokenizer.json; `pre_tokenizer` replaces the ByteLevel one when given.
inline std::string write_gpt2_tokenizer_json(const std::string& name = "gpt2-tokenizer.json",
                                             const nlohmann::json& pre_tokenizer = {},
                                             bool ignore_merges = false) {
  const std::string path = gpt2_work_dir() + "/" + name;
  if (std::filesystem::exists(path)) return path;
  const std::string bpe = data::read_file(gpt2_fixture("vocab.bpe.gz"));
  nlohmann::json merges = nlohmann::json::array();
  size_t start = bpe.find('\n') + 1;  // after "#version: 0.2"
  while (start < bpe.size()) {
    size_t end = bpe.find('\n', start);
    if (end == std::string::npos) end = bpe.size();
    if (end > start) merges.push_back(bpe.substr(start, end - start));
    start = end + 1;
  }
  nlohmann::json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = {{{"id", 50256},
                        {"content", "<|endoftext|>"},
                        {"single_word", false},
                        {"lstrip", false},
                        {"rstrip", false},
                        {"normalized", true},
                        {"special", true}}};
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = pre_tokenizer.is_null() ? nlohmann::json{{"type", "ByteLevel"},
                                                                {"add_prefix_space", false},
                                                                {"trim_offsets", true},
                                                                {"use_regex", true}}
                                               : pre_tokenizer;
  j["post_processor"] = nullptr;
  j["decoder"] = {{"type", "ByteLevel"},
                  {"add_prefix_space", true},
                  {"trim_offsets", true},
                  {"use_regex", true}};
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", ignore_merges},
                {"vocab", gpt2_encoder()},
                {"merges", merges}};
  data::write_file_atomic(path, {j.dump()});
  return path;
}

// GPT-2's ranks as tiktoken writes them (r50k_base): base64 of each token's bytes, its id.
inline std::string write_gpt2_tiktoken() {
  const std::string path = gpt2_work_dir() + "/gpt2.tiktoken";
  if (std::filesystem::exists(path)) return path;
  std::vector<std::string> by_id(50256);
  for (const auto& [token, id] : gpt2_encoder().items()) {
    if (id.get<int>() < 50256) by_id[id.get<int>()] = *data::byte_level_decode(token);
  }
  std::string text;
  for (size_t id = 0; id < by_id.size(); ++id)
    text += base64(by_id[id]) + " " + std::to_string(id) + "\n";
  data::write_file_atomic(path, {text});
  return path;
}

// The 1,996 (text, ids) pairs of gpt2_reference_encodings.jsonl.
inline const std::vector<std::pair<std::string, std::vector<int32_t>>>& gpt2_references() {
  static const auto refs = [] {
    std::vector<std::pair<std::string, std::vector<int32_t>>> out;
    const std::string text = data::read_file(gpt2_fixture("gpt2_reference_encodings.jsonl.gz"));
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      if (end > start) {
        const auto j = nlohmann::json::parse(text.substr(start, end - start));
        out.emplace_back(j["text"].get<std::string>(), j["ids"].get<std::vector<int32_t>>());
      }
      start = end + 1;
    }
    return out;
  }();
  return refs;
}

}  // namespace trillion::test
