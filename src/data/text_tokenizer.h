// One encode interface over the tokenizers trillion reads: its own byte-level BPE
// (data/tokenizer.h), a Hugging Face tokenizer.json with a byte-level BPE model, and a tiktoken
// ranks file (data/ranked_bpe.h). Invariants: encode never emits a special token (text that looks
// like "<|endoftext|>" is encoded as ordinary text, as tiktoken's encode_ordinary and Hugging
// Face's encode_special_tokens do), so specials appear only where a caller puts them;
// decode(encode(x)) == x for UTF-8 text; a loaded tokenizer is immutable, so encode may be called
// from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace trillion::data {

class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;

  // "trillion-bpe", "hf-tokenizer.json" or "tiktoken".
  virtual std::string format() const = 0;
  // Ids are in [0, vocab_size()).
  virtual int vocab_size() const = 0;
  virtual void encode_append(std::string_view text, std::vector<int32_t>& out) const = 0;
  std::vector<int32_t> encode(std::string_view text) const;
  // Throws a trillion::Error for an id the tokenizer does not have.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // The token that ends a document (<|eos|>, <|endoftext|>, <|end_of_text|>), if there is one.
  virtual std::optional<int32_t> document_end_id() const = 0;
  // The token that begins one (<|bos|>, <|begin_of_text|>), if there is one.
  virtual std::optional<int32_t> document_begin_id() const = 0;
};

// Reads a tokenizer file of any of the three formats (a .gz of one too), told apart by content:
// a JSON object with "format": "trillion-bpe", a JSON object with a "model" (tokenizer.json),
// else lines of "<base64 token> <rank>" (tiktoken). Errors name the path and what is wrong.
std::unique_ptr<TextTokenizer> load_text_tokenizer(const std::string& path);

// "xxh64:<16 hex digits>" of the file's bytes as stored: what a manifest records, so data
// prepared with one tokenizer file is never silently read with another.
std::string tokenizer_file_hash(const std::string& path);

// The document-end id, or an Error naming the tokenizer file and the fix.
int32_t require_document_end_id(const TextTokenizer& tokenizer, const std::string& path);

}  // namespace trillion::data
