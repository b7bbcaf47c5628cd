// See hf_tokenizer.h.
#include "interop/hf_tokenizer.h"

#include <nlohmann/json.hpp>

#include "data/byte_level.h"

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

}  // namespace trillion::interop
