// See hf_tokenizer.h.
#include "interop/hf_tokenizer.h"

#include <nlohmann/json.hpp>

#include "data/byte_level.h"
#include "data/file_io.h"
#include "data/regex_split.h"

namespace trillion::interop {

std::string byte_level_char(unsigned char b) {
  return data::byte_level_char(b);
}

std::string byte_level_string(const std::string& bytes) {
  return data::byte_level_string(bytes);
}

std::string hf_tokenizer_json(const data::Tokenizer& tok) {
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  const int specials_begin = 256 + static_cast<int>(tok.merges().size());
  for (int id = 0; id < specials_begin; ++id) vocab[byte_level_string(tok.token_bytes(id))] = id;
  nlohmann::ordered_json merges = nlohmann::ordered_json::array();
  for (const auto& [l, r] : tok.merges()) {
    merges.push_back(byte_level_string(tok.token_bytes(l)) + " " +
                     byte_level_string(tok.token_bytes(r)));
  }
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  for (int id = specials_begin; id < tok.vocab_size(); ++id) {
    added.push_back({{"id", id},
                     {"content", tok.token_bytes(id)},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  // data/pretokenize.h's classes: letters = ASCII letters and all non-ASCII, digits 0-9, spaces
  // the six ASCII whitespace bytes, the rest punctuation.
  const std::string L = "A-Za-z\\x{80}-\\x{10FFFF}", S = " \\t\\n\\r\\x0B\\f";
  const std::string pattern = "'s|'t|'re|'ve|'m|'ll|'d| ?[" + L + "]+| ?[0-9]+| ?[^" + S + L +
                              "0-9]+|[" + S + "]+(?![^" + S + "])|[" + S + "]+";
  nlohmann::ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = added;
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"},
                           {"pattern", {{"Regex", pattern}}},
                           {"behavior", "Isolated"},
                           {"invert", false}},
                          {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", false}}}}};
  j["post_processor"] = nullptr;
  j["decoder"] = {{"type", "ByteLevel"},
                  {"add_prefix_space", false},
                  {"trim_offsets", true},
                  {"use_regex", false}};
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", merges}};
  return j.dump(2) + "\n";
}

// nlohmann::json (sorted keys), not ordered_json: ordered_json inserts in linear time, which is
// quadratic over a 128k vocabulary.
std::string hf_tokenizer_json(const data::RankedBpe& tok) {
  using Kind = data::RankedBpe::TokenKind;
  nlohmann::json vocab = nlohmann::json::object();
  nlohmann::json added = nlohmann::json::array();
  const auto& bytes = tok.spec().token_bytes;
  for (int id = 0; id < tok.vocab_size(); ++id) {
    if (tok.kind(id) == Kind::kNormal) vocab[data::byte_level_string(bytes[id])] = id;
    if (tok.kind(id) != Kind::kSpecial) continue;
    added.push_back({{"id", id},
                     {"content", bytes[id]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& [l, r] : tok.merge_list()) {
    merges.push_back({data::byte_level_string(bytes[l]), data::byte_level_string(bytes[r])});
  }
  const bool gpt2 = tok.spec().pattern == data::SplitPattern::kGpt2;
  const nlohmann::json byte_level = {{"type", "ByteLevel"},
                                     {"add_prefix_space", tok.spec().add_prefix_space},
                                     {"trim_offsets", true},
                                     {"use_regex", gpt2}};
  nlohmann::json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = added;
  j["normalizer"] = nullptr;
  if (gpt2) {
    j["pre_tokenizer"] = byte_level;
  } else {
    j["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", data::split_pattern_regex(tok.spec().pattern)}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          byte_level}}};
    j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = false;
  }
  j["post_processor"] = nullptr;
  j["decoder"] = {{"type", "ByteLevel"},
                  {"add_prefix_space", true},
                  {"trim_offsets", true},
                  {"use_regex", true}};
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", tok.spec().byte_fallback},
                {"ignore_merges", tok.spec().ignore_merges},
                {"vocab", vocab},
                {"merges", merges}};
  return j.dump() + "\n";
}

ExportedTokenizer export_tokenizer_json(const std::string& path) {
  const std::unique_ptr<data::TextTokenizer> tok = data::load_text_tokenizer(path);
  ExportedTokenizer e;
  e.vocab_size = tok->vocab_size();
  e.bos = tok->document_begin_id();
  e.eos = tok->document_end_id();
  if (const auto* own = dynamic_cast<const data::Tokenizer*>(tok.get())) {
    e.json = hf_tokenizer_json(*own);
  } else if (tok->format() == "hf-tokenizer.json") {
    e.json = data::read_file(path);  // the user's file, byte for byte
  } else {
    e.json = hf_tokenizer_json(dynamic_cast<const data::RankedBpe&>(*tok));
  }
  return e;
}

}  // namespace trillion::interop
