// Readers of existing tokenizer files (tokenizer.json, tiktoken ranks) into RankedBpe, and the
// one loader that tells the three formats apart. Every field is checked; an Error names the file,
// the field and what this code supports instead.
#include <fmt/format.h>

#include <cctype>
#include <nlohmann/json.hpp>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/error.h"
#include "core/json_fields.h"
#include "data/byte_level.h"
#include "data/file_io.h"
#include "data/ranked_bpe.h"
#include "data/tokenizer.h"

namespace trillion::data {

namespace {
using TokenKind = RankedBpe::TokenKind;

// Names of a document's end and beginning in the tokenizers people use, most specific first.
constexpr const char* kEndNames[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<|eos|>"};
constexpr const char* kBeginNames[] = {"<|begin_of_text|>", "<s>", "<|bos|>"};

void find_named_specials(RankedBpe::Spec& spec) {
  auto find = [&](const auto& names) -> std::optional<int32_t> {
    for (const char* name : names)
      for (size_t id = 0; id < spec.token_bytes.size(); ++id)
        if (spec.kinds[id] == TokenKind::kSpecial && spec.token_bytes[id] == name)
          return static_cast<int32_t>(id);
    return std::nullopt;
  };
  spec.end_id = find(kEndNames);
  spec.begin_id = find(kBeginNames);
}

int32_t checked_id(const nlohmann::json& v, const std::string& where) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= (int64_t{1} << 31))
    throw Error(where + " is " + v.dump() + ", expected a token id in [0, 2^31)");
  return static_cast<int32_t>(v.get<int64_t>());
}

// The pre_tokenizer of a byte-level BPE: ByteLevel (with its own GPT-2 regex), or Sequence of a
// Split on a known regex and ByteLevel without one.
void read_pre_tokenizer(const nlohmann::json& pre, RankedBpe::Spec& spec,
                        const std::string& origin) {
  const std::string supported =
      "supported: ByteLevel (use_regex true), or Sequence [Split (GPT-2 or Llama 3 regex, "
      "behavior Isolated), ByteLevel (use_regex false)]";
  auto type = [&](const nlohmann::json& p) {
    return p.is_object() && p.contains("type") && p["type"].is_string()
               ? p["type"].get<std::string>()
               : std::string("?");
  };
  auto byte_level = [&](const nlohmann::json& p, bool want_regex) {
    spec.add_prefix_space = p.value("add_prefix_space", false);
    if (p.value("use_regex", true) != want_regex)
      throw Error(origin + ": pre_tokenizer ByteLevel has use_regex " +
                  (want_regex ? "false" : "true") + " where this code needs it " +
                  (want_regex ? "true" : "false") + "; " + supported);
  };
  if (type(pre) == "ByteLevel") {
    byte_level(pre, true);
    spec.pattern = SplitPattern::kGpt2;
    return;
  }
  if (type(pre) == "Sequence" && pre.contains("pretokenizers") && pre["pretokenizers"].is_array() &&
      pre["pretokenizers"].size() == 2 && type(pre["pretokenizers"][0]) == "Split" &&
      type(pre["pretokenizers"][1]) == "ByteLevel") {
    const nlohmann::json& split = pre["pretokenizers"][0];
    const nlohmann::json pattern = split.value("pattern", nlohmann::json::object());
    if (!pattern.contains("Regex") || !pattern["Regex"].is_string())
      throw Error(origin + ": pre_tokenizer Split has no \"Regex\" pattern; " + supported);
    const std::string regex = pattern["Regex"].get<std::string>();
    const auto known = split_pattern_from_regex(regex);
    if (!known)
      throw Error(origin + ": pre_tokenizer Split regex " + nlohmann::json(regex).dump() +
                  " is not one this code implements (GPT-2's or Llama 3's); " + supported);
    if (split.value("behavior", std::string()) != "Isolated" || split.value("invert", false))
      throw Error(origin + ": pre_tokenizer Split must have behavior Isolated and invert false");
    spec.pattern = *known;
    byte_level(pre["pretokenizers"][1], false);
    return;
  }
  throw Error(origin + ": pre_tokenizer " + type(pre) + " is not supported; " + supported);
}

void read_model_options(const nlohmann::json& model, RankedBpe::Spec& spec,
                        const std::string& origin) {
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() &&
        !(model[key].is_string() && model[key].get<std::string>().empty()))
      throw Error(origin + ": model." + key + " is " + model[key].dump() +
                  "; only byte-level BPE without one is supported");
  }
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      !(model["dropout"].is_number() && model["dropout"].get<double>() == 0))
    throw Error(origin + ": model.dropout is " + model["dropout"].dump() +
                "; encoding must be deterministic, so give null");
  spec.ignore_merges = model.value("ignore_merges", false);
  spec.byte_fallback = model.value("byte_fallback", false);
}
}  // namespace

std::unique_ptr<RankedBpe> load_hf_tokenizer_json(std::string_view text, const std::string& path) {
  const std::string origin = "tokenizer '" + path + "'";
  const nlohmann::json j = parse_json(text, origin);
  const nlohmann::json& model = json_field(j, "model", origin);
  if (!model.is_object() || model.value("type", std::string("BPE")) != "BPE")
    throw Error(origin + ": model type " + (model.is_object() ? model.value("type", "?") : "?") +
                " is not BPE; only byte-level BPE tokenizer.json files are supported");
  RankedBpe::Spec spec;
  spec.format = "hf-tokenizer.json";
  read_model_options(model, spec, origin);
  const nlohmann::json& vocab = json_field(model, "vocab", origin + " model");
  if (!vocab.is_object()) throw Error(origin + ": model.vocab is not an object");
  const nlohmann::json added = j.contains("added_tokens") && j["added_tokens"].is_array()
                                   ? j["added_tokens"]
                                   : nlohmann::json::array();
  int64_t size = 0;
  for (const auto& [token, id] : vocab.items())
    size = std::max<int64_t>(size, checked_id(id, origin + ": vocab id of " + token) + 1);
  for (const nlohmann::json& a : added)
    size = std::max<int64_t>(
        size, checked_id(a.value("id", nlohmann::json()), origin + ": an added token's id") + 1);
  spec.token_bytes.assign(size, std::string());
  spec.kinds.assign(size, TokenKind::kHole);
  for (const auto& [token, id_json] : vocab.items()) {
    const int32_t id = id_json.get<int32_t>();
    std::optional<std::string> bytes;
    if (spec.byte_fallback && token.size() == 6 && token.starts_with("<0x") &&
        token.ends_with(">") && std::isxdigit(static_cast<unsigned char>(token[3])) &&
        std::isxdigit(static_cast<unsigned char>(token[4]))) {
      const auto byte = static_cast<unsigned char>(std::stoi(token.substr(3, 2), nullptr, 16));
      bytes = std::string(1, static_cast<char>(byte));
      spec.fallback_byte[id] = byte;
    } else {
      bytes = byte_level_decode(token);
    }
    spec.token_bytes[id] = bytes ? *bytes : token;
    spec.kinds[id] = TokenKind::kNormal;
  }
  for (const nlohmann::json& a : added) {
    const int32_t id = a["id"].get<int32_t>();
    if (!a.contains("content") || !a["content"].is_string())
      throw Error(origin + ": added token " + std::to_string(id) + " has no string \"content\"");
    spec.token_bytes[id] = a["content"].get<std::string>();
    const bool special = a.value("special", false);
    spec.kinds[id] = special ? TokenKind::kSpecial : TokenKind::kNormal;
    if (!special) spec.text_added.emplace_back(spec.token_bytes[id], id);
  }
  for (int b = 0; b < 256; ++b) {
    const std::string symbol = byte_level_char(static_cast<unsigned char>(b));
    if (auto it = vocab.find(symbol); it != vocab.end()) {
      spec.byte_ids[b] = it->get<int32_t>();
      continue;
    }
    // Hugging Face's byte fallback: a character the vocabulary lacks becomes the <0xXX> tokens
    // of its UTF-8 bytes (here the byte-level character's, one or two).
    std::vector<int32_t> fallback;
    for (const char u : symbol) {
      auto it = spec.byte_fallback
                    ? vocab.find(fmt::format("<0x{:02X}>", static_cast<unsigned char>(u)))
                    : vocab.end();
      if (it == vocab.end()) {
        throw Error(fmt::format(
            "{}: the vocabulary has no token for byte 0x{:02X} (\"{}\"){}; only byte-level "
            "BPE tokenizers (GPT-2, Llama 3 style) are supported",
            origin, b, symbol,
            spec.byte_fallback ? fmt::format(" and no byte-fallback token <0x{:02X}>",
                                             static_cast<unsigned char>(u))
                               : ""));
      }
      fallback.push_back(it->get<int32_t>());
    }
    spec.byte_ids[b] = -1;
    spec.fallback_ids[b] = std::move(fallback);
  }
  const nlohmann::json& merges = json_field(model, "merges", origin + " model");
  if (!merges.is_array()) throw Error(origin + ": model.merges is not an array");
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const nlohmann::json& m = merges[rank];
    std::string left, right;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        throw Error(origin + ": merge " + std::to_string(rank) + " " + m.dump() +
                    " is not \"left right\"");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      throw Error(origin + ": merge " + std::to_string(rank) + " is " + m.dump().substr(0, 60) +
                  ", expected \"left right\" or [\"left\", \"right\"]");
    }
    auto l = vocab.find(left), r = vocab.find(right), joined = vocab.find(left + right);
    if (l == vocab.end() || r == vocab.end() || joined == vocab.end())
      throw Error(origin + ": merge " + std::to_string(rank) + " " + m.dump() +
                  " names a token that is not in model.vocab");
    spec.merges.emplace(RankedBpe::pair_key(l->get<int32_t>(), r->get<int32_t>()),
                        RankedBpe::MergeRule{static_cast<int32_t>(rank), joined->get<int32_t>()});
  }
  if (j.contains("normalizer") && !j["normalizer"].is_null())
    throw Error(origin + ": a normalizer (" + j["normalizer"].value("type", "?") +
                ") is not supported; byte-level BPE tokenizers (GPT-2, Llama 3) have none");
  read_pre_tokenizer(json_field(j, "pre_tokenizer", origin), spec, origin);
  find_named_specials(spec);
  return std::make_unique<RankedBpe>(std::move(spec));
}

namespace {
int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

std::optional<std::string> base64_decode(std::string_view s) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  size_t i = 0;
  for (; i < s.size() && s[i] != '='; ++i) {
    const int v = base64_value(s[i]);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  for (; i < s.size(); ++i)
    if (s[i] != '=') return std::nullopt;
  return out;
}

// The special tokens that go with a known number of tiktoken ranks: {id, text} pairs.
std::vector<std::pair<int32_t, std::string>> tiktoken_specials(int32_t ranks) {
  if (ranks == 100256) {
    return {{100257, "<|endoftext|>"},
            {100258, "<|fim_prefix|>"},
            {100259, "<|fim_middle|>"},
            {100260, "<|fim_suffix|>"},
            {100276, "<|endofprompt|>"}};
  }
  if (ranks == 128000) {  // Llama 3: 256 specials, most of them reserved
    std::vector<std::pair<int32_t, std::string>> s = {{128000, "<|begin_of_text|>"},
                                                      {128001, "<|end_of_text|>"},
                                                      {128006, "<|start_header_id|>"},
                                                      {128007, "<|end_header_id|>"},
                                                      {128009, "<|eot_id|>"}};
    int reserved = 0;
    for (int32_t id = 128000; id < 128256; ++id) {
      if (id == 128000 || id == 128001 || id == 128006 || id == 128007 || id == 128009) continue;
      s.emplace_back(id, "<|reserved_special_token_" + std::to_string(reserved++) + "|>");
    }
    return s;
  }
  return {{ranks, "<|endoftext|>"}};
}
}  // namespace

std::unique_ptr<RankedBpe> load_tiktoken(std::string_view text, const std::string& path) {
  const std::string origin = "tiktoken ranks file '" + path + "'";
  std::vector<std::optional<std::string>> by_rank;
  std::unordered_map<std::string, int32_t> rank_of;
  int64_t line_number = 0;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    const std::string where = origin + " line " + std::to_string(line_number);
    if (space == std::string_view::npos) throw Error(where + " is not \"<base64 token> <rank>\"");
    const std::optional<std::string> bytes = base64_decode(line.substr(0, space));
    int64_t rank = -1;
    try {
      size_t used = 0;
      const std::string number(line.substr(space + 1));
      rank = std::stoll(number, &used);
      if (used != number.size()) rank = -1;
    } catch (const std::exception&) {
    }
    if (!bytes || bytes->empty() || rank < 0 || rank >= (int64_t{1} << 30))
      throw Error(where + " is not \"<base64 token> <rank>\" with a rank in [0, 2^30)");
    if (static_cast<int64_t>(by_rank.size()) <= rank) by_rank.resize(rank + 1);
    if (by_rank[rank] || !rank_of.emplace(*bytes, static_cast<int32_t>(rank)).second)
      throw Error(where + " repeats a rank or a token");
    by_rank[rank] = *bytes;
  }
  const int32_t ranks = static_cast<int32_t>(by_rank.size());
  for (int32_t r = 0; r < ranks; ++r)
    if (!by_rank[r]) throw Error(origin + ": rank " + std::to_string(r) + " is missing");
  RankedBpe::Spec spec;
  spec.format = "tiktoken";
  spec.pattern = ranks >= 100000 ? SplitPattern::kLlama3 : SplitPattern::kGpt2;
  const auto specials = tiktoken_specials(ranks);
  int32_t size = ranks;
  for (const auto& [id, name] : specials) size = std::max(size, id + 1);
  spec.token_bytes.assign(size, std::string());
  spec.kinds.assign(size, TokenKind::kHole);
  for (int32_t r = 0; r < ranks; ++r) {
    spec.token_bytes[r] = *by_rank[r];
    spec.kinds[r] = TokenKind::kNormal;
  }
  for (const auto& [id, name] : specials) {
    spec.token_bytes[id] = name;
    spec.kinds[id] = TokenKind::kSpecial;
  }
  for (int b = 0; b < 256; ++b) {
    auto it = rank_of.find(std::string(1, static_cast<char>(b)));
    if (it == rank_of.end())
      throw Error(
          fmt::format("{}: no rank for the byte 0x{:02X}; every byte must be a token", origin, b));
    spec.byte_ids[b] = it->second;
  }
  // A pair's rank is the rank of the token it makes: every split of a token into two tokens.
  for (int32_t r = 0; r < ranks; ++r) {
    const std::string& t = *by_rank[r];
    for (size_t k = 1; k < t.size(); ++k) {
      auto l = rank_of.find(t.substr(0, k));
      if (l == rank_of.end()) continue;
      auto rr = rank_of.find(t.substr(k));
      if (rr != rank_of.end())
        spec.merges.emplace(RankedBpe::pair_key(l->second, rr->second), RankedBpe::MergeRule{r, r});
    }
  }
  find_named_specials(spec);
  return std::make_unique<RankedBpe>(std::move(spec));
}

std::vector<int32_t> TextTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  encode_append(text, ids);
  return ids;
}

std::unique_ptr<TextTokenizer> load_text_tokenizer(const std::string& path) {
  const std::string text = read_file(path);
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') {
    const nlohmann::json j = parse_json(text, "tokenizer '" + path + "'");
    if (j.is_object() && j.contains("format"))
      return std::make_unique<Tokenizer>(Tokenizer::from_json(text, path));
    if (j.is_object() && j.contains("model")) return load_hf_tokenizer_json(text, path);
    throw Error("tokenizer '" + path +
                "' is a JSON file but neither a trillion tokenizer (\"format\") nor a Hugging "
                "Face tokenizer.json (\"model\"); pass one of those or a tiktoken ranks file");
  }
  return load_tiktoken(text, path);
}

std::string tokenizer_file_hash(const std::string& path) {
  const std::string bytes = read_file_raw(path);
  return fmt::format("xxh64:{:016x}", XXH64(bytes.data(), bytes.size(), 0));
}

int32_t require_document_end_id(const TextTokenizer& tokenizer, const std::string& path) {
  if (auto id = tokenizer.document_end_id()) return *id;
  std::string names;
  for (const char* n : kEndNames) names += std::string(names.empty() ? "" : ", ") + n;
  throw Error("tokenizer '" + path + "' has no document-end token (a special token named one of " +
              names + "); add one to its added_tokens, or use another tokenizer");
}

}  // namespace trillion::data
