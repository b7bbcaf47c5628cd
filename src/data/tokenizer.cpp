// See tokenizer.h. Encoding applies, within each pre-tokenized chunk, the lowest-ranked merge
// present until none applies (the same greedy order training used), and caches each chunk's
// ids: natural text repeats its words, so most chunks are cache hits.
#include "data/tokenizer.h"

#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_fields.h"
#include "data/file_io.h"
#include "data/pretokenize.h"

namespace trillion::data {

namespace {
constexpr const char* kSpecialNames[kNumSpecialTokens] = {"<|bos|>", "<|eos|>", "<|pad|>"};
constexpr size_t kMaxCacheEntries = 1 << 20;
constexpr const char* kFormat = "trillion-bpe";
constexpr int kFormatVersion = 1;
constexpr const char* kPretokenizer = "gpt2-bytes-v1";  // pretokenize.h's splitting

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
}  // namespace

const char* special_token_name(int index) {
  return kSpecialNames[index];
}

Tokenizer::Tokenizer(std::vector<std::pair<int32_t, int32_t>> merges, const std::string& origin)
    : merges_(std::move(merges)) {
  token_bytes_.reserve(256 + merges_.size() + kNumSpecialTokens);
  for (int b = 0; b < 256; ++b) token_bytes_.emplace_back(1, static_cast<char>(b));
  for (size_t i = 0; i < merges_.size(); ++i) {
    auto [a, b] = merges_[i];
    int32_t id = 256 + static_cast<int32_t>(i);
    if (a < 0 || b < 0 || a >= id || b >= id) {
      throw Error(origin + ": merge " + std::to_string(i) + " [" + std::to_string(a) + ", " +
                  std::to_string(b) + "] refers to an id not defined before it (" +
                  std::to_string(id) + ")");
    }
    if (token_bytes_[a].size() + token_bytes_[b].size() > kMaxChunkBytes) {
      // Training never merges across a pre-token chunk, so no real token is longer than one;
      // without this bound, merges that each double a token ask for 2^M bytes.
      throw Error(origin + ": merge " + std::to_string(i) + " makes a token of " +
                  std::to_string(token_bytes_[a].size() + token_bytes_[b].size()) +
                  " bytes, longer than any trained token (" + std::to_string(kMaxChunkBytes) + ")");
    }
    if (!merge_id_.emplace(pair_key(a, b), id).second) {
      throw Error(origin + ": merge " + std::to_string(i) + " repeats an earlier pair");
    }
    token_bytes_.push_back(token_bytes_[a] + token_bytes_[b]);
  }
  for (const char* name : kSpecialNames) token_bytes_.emplace_back(name);
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw Error("token id " + std::to_string(id) + " is outside the tokenizer's vocabulary [0, " +
                std::to_string(vocab_size()) + "); was the data made with another tokenizer?");
  }
  return token_bytes_[id];
}

void Tokenizer::encode_chunk(std::string_view chunk, std::vector<int32_t>& out) const {
  {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    auto it = cache_->entries.find(chunk);
    if (it != cache_->entries.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> symbols(chunk.size());
  for (size_t i = 0; i < chunk.size(); ++i) symbols[i] = static_cast<unsigned char>(chunk[i]);
  while (symbols.size() > 1) {
    int32_t best = std::numeric_limits<int32_t>::max();
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      auto it = merge_id_.find(pair_key(symbols[i], symbols[i + 1]));
      if (it != merge_id_.end() && it->second < best) best = it->second;
    }
    if (best == std::numeric_limits<int32_t>::max()) break;
    auto [a, b] = merges_[best - 256];
    size_t write = 0;
    for (size_t read = 0; read < symbols.size(); ++read) {
      if (read + 1 < symbols.size() && symbols[read] == a && symbols[read + 1] == b) {
        symbols[write++] = best;
        ++read;
      } else {
        symbols[write++] = symbols[read];
      }
    }
    symbols.resize(write);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
  std::lock_guard<std::mutex> lock(cache_->mutex);
  if (cache_->entries.size() >= kMaxCacheEntries) cache_->entries.clear();
  cache_->entries.emplace(std::string(chunk), std::move(symbols));
}

void Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) const {
  pretokenize(text, [&](std::string_view chunk) { encode_chunk(chunk, out); });
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  encode_append(text, ids);
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  for (int32_t id : ids) text += token_bytes(id);
  return text;
}

void Tokenizer::save(const std::string& path) const {
  nlohmann::json j;
  j["format"] = kFormat;
  j["version"] = kFormatVersion;
  j["pretokenizer"] = kPretokenizer;
  j["vocab_size"] = vocab_size();
  nlohmann::json merges = nlohmann::json::array();
  for (auto [a, b] : merges_) merges.push_back({a, b});
  j["merges"] = merges;
  nlohmann::json specials;
  for (int k = 0; k < kNumSpecialTokens; ++k) specials[kSpecialNames[k]] = special_base() + k;
  j["special_tokens"] = specials;
  write_file_atomic(path, {j.dump(1), "\n"});
}

Tokenizer Tokenizer::load(const std::string& path) {
  return from_json(read_file(path), path);
}

Tokenizer Tokenizer::from_json(std::string_view text, const std::string& path) {
  const std::string origin = "tokenizer '" + path + "'";
  try {
    const nlohmann::json j = parse_json(text, origin);
    if (!json_has(j, "format") || !j.at("format").is_string() ||
        j.at("format").get<std::string>() != kFormat) {
      throw Error(origin + ": not a trillion-bpe tokenizer (no \"format\": \"" + kFormat + "\")");
    }
    const int64_t version = json_int(j, "version", origin);
    if (version != kFormatVersion) {
      throw Error(origin + ": format version " + std::to_string(version) + " is not " +
                  std::to_string(kFormatVersion));
    }
    const nlohmann::json& list = json_field(j, "merges", origin);
    if (!list.is_array()) {
      throw Error(origin + ": field 'merges' is " + json_kind(list) + ", expected an array");
    }
    if (list.size() > static_cast<size_t>(kMaxMerges)) {
      throw Error(origin + ": " + std::to_string(list.size()) +
                  " merges exceed the largest vocabulary (2^31 ids)");
    }
    std::vector<std::pair<int32_t, int32_t>> merges;
    merges.reserve(list.size());
    // An id outside int32 becomes -1, which the constructor reports with the merge's index.
    auto id = [](const nlohmann::json& v) -> int32_t {
      if (v.is_number_unsigned()) return v.get<uint64_t>() > INT32_MAX ? -1 : v.get<int32_t>();
      const int64_t x = v.get<int64_t>();
      return x < 0 || x > INT32_MAX ? -1 : static_cast<int32_t>(x);
    };
    for (size_t i = 0; i < list.size(); ++i) {
      const nlohmann::json& m = list[i];
      if (!m.is_array() || m.size() != 2 || !m[0].is_number_integer() ||
          !m[1].is_number_integer()) {
        std::string text = m.dump();
        if (text.size() > 40) text = text.substr(0, 40) + "...";
        throw Error(origin + ": merge " + std::to_string(i) + " is " + text +
                    ", expected a pair of integer token ids [left, right]");
      }
      merges.emplace_back(id(m[0]), id(m[1]));
    }
    Tokenizer tokenizer(std::move(merges), origin);
    const int64_t vocab_size = json_int(j, "vocab_size", origin);
    if (vocab_size != tokenizer.vocab_size()) {
      throw Error(origin + ": vocab_size " + std::to_string(vocab_size) + " does not match its " +
                  std::to_string(tokenizer.merges().size()) + " merges (" +
                  std::to_string(tokenizer.vocab_size()) + " ids)");
    }
    // The optional fields save() writes must say what this code does: a file that asks for
    // another pre-tokenizer or other special-token ids would be encoded differently than it says.
    if (json_has(j, "pretokenizer")) {
      const nlohmann::json& p = j.at("pretokenizer");
      if (!p.is_string() || p.get<std::string>() != kPretokenizer) {
        throw Error(origin + ": field 'pretokenizer' is " + p.dump() +
                    ", but this version splits text with \"" + kPretokenizer + "\" only");
      }
    }
    if (json_has(j, "special_tokens")) {
      const nlohmann::json& specials = j.at("special_tokens");
      std::string want;
      for (int k = 0; k < kNumSpecialTokens; ++k) {
        want += std::string(k ? ", " : "") + "\"" + kSpecialNames[k] +
                "\": " + std::to_string(tokenizer.special_base() + k);
      }
      want = "expected {" + want + "} (the ids after the merges)";
      if (!specials.is_object()) {
        throw Error(origin + ": field 'special_tokens' is " + json_kind(specials) + ", " + want);
      }
      for (const auto& [name, id] : specials.items()) {
        int k = 0;
        while (k < kNumSpecialTokens && name != kSpecialNames[k]) ++k;
        if (k == kNumSpecialTokens) {
          throw Error(origin + ": field 'special_tokens' names \"" + name +
                      "\", which this tokenizer does not have; " + want);
        }
        if (!id.is_number_integer() || id.get<int64_t>() != tokenizer.special_base() + k) {
          std::string text = id.dump();
          if (text.size() > 40) text = text.substr(0, 40) + "...";
          throw Error(origin + ": field 'special_tokens' gives \"" + name + "\" the id " + text +
                      ", " + want);
        }
      }
      if (specials.size() != static_cast<size_t>(kNumSpecialTokens)) {
        throw Error(origin + ": field 'special_tokens' has " + std::to_string(specials.size()) +
                    " entries, " + want);
      }
    }
    return tokenizer;
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + "; retrain it with 'trillion tokenizer train'");
  }
}

void check_tokenizer_matches(const Tokenizer& tokenizer, const std::string& tokenizer_path,
                             int64_t vocab_size, const std::string& other) {
  if (tokenizer.vocab_size() != vocab_size) {
    throw Error("vocabulary mismatch: tokenizer '" + tokenizer_path + "' has vocab size " +
                std::to_string(tokenizer.vocab_size()) + " but " + other + " has vocab size " +
                std::to_string(vocab_size) + "; use the tokenizer the data was prepared with");
  }
}

}  // namespace trillion::data
