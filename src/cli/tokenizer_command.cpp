// `trillion tokenizer train|encode|decode`: trains a byte-level BPE tokenizer on text files
// (gzip or plain), and applies it or its inverse; encode and decode also take a Hugging Face
// tokenizer.json or a tiktoken ranks file (data/text_tokenizer.h). Ids are printed/read as
// whitespace-separated decimal numbers; decoded bytes are written to stdout unchanged.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>

#include "cli/commands.h"
#include "cli/output_guard.h"
#include "cli/parse_arguments.h"
#include "core/error.h"
#include "core/timer.h"
#include "data/file_io.h"
#include "data/text_tokenizer.h"
#include "data/tokenizer.h"

namespace trillion::cli {

namespace {

std::string read_stdin() {
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    try {
      size_t used = 0;
      long long id = std::stoll(word, &used);
      if (used != word.size() || id < 0 || id > INT32_MAX) throw std::invalid_argument(word);
      ids.push_back(static_cast<int32_t>(id));
    } catch (const std::exception&) {
      throw Error("'" + word + "' is not a token id; pass non-negative integers");
    }
  }
  return ids;
}

}  // namespace

int tokenizer_command(int argc, char** argv) {
  CLI::App app{"Train, apply and invert a byte-level BPE tokenizer", "trillion tokenizer"};
  app.require_subcommand(1);

  auto* train = app.add_subcommand("train", "learn BPE merges from text files");
  int vocab = 4096;
  std::string out;
  std::vector<std::string> inputs;
  train->add_option("--vocab", vocab, "total vocabulary size, incl. 256 bytes and 3 specials")
      ->capture_default_str();
  train->add_option("--out", out, "tokenizer JSON to write")->required();
  train->add_option("inputs", inputs, "text files (.gz allowed)")->required();
  bool overwrite = false;
  train->add_flag("--overwrite", overwrite, "replace the --out file if it exists");

  auto* encode = app.add_subcommand("encode", "print the token ids of a text");
  auto* decode = app.add_subcommand("decode", "print the text of token ids");
  std::string tokenizer_path, text, input;
  bool bos = false, eos = false;
  for (CLI::App* sub : {encode, decode}) {
    sub->add_option("--tokenizer", tokenizer_path,
                    "tokenizer: trillion JSON, Hugging Face tokenizer.json or tiktoken ranks")
        ->required();
  }
  encode->add_option("--text", text, "text to encode (else --input, else stdin)");
  encode->add_option("--input", input, "file to encode (.gz allowed)");
  encode->add_flag("--bos", bos, "prepend the document-begin token (<|bos|>, ...)");
  encode->add_flag("--eos", eos, "append the document-end token (<|eos|>, <|endoftext|>, ...)");
  std::vector<std::string> id_words;
  decode->add_option("ids", id_words, "token ids (else read from stdin)");

  if (const int rc = parse_arguments(app, argc, argv); rc >= 0) return rc;

  if (*train) {
    refuse_to_replace({out}, overwrite);
    std::vector<std::string> texts;
    size_t total = 0;
    for (const std::string& path : inputs) {
      texts.push_back(data::read_file(path));
      data::check_text(texts.back(), path);  // merges learned from a binary fit no text
      total += texts.back().size();
    }
    if (total == 0) {
      std::string names;
      for (const std::string& path : inputs) names += (names.empty() ? "'" : ", '") + path + "'";
      throw Error("no text to learn from: " + names +
                  (inputs.size() == 1 ? " is empty" : " are empty") +
                  "; pass the text files the tokenizer is for (nothing was written)");
    }
    data::BpeTrainStats stats;
    data::Tokenizer tokenizer = data::Tokenizer::train(texts, vocab, &stats);
    tokenizer.save(out);
    Timer timer;
    int64_t tokens = 0;
    for (const std::string& t : texts) tokens += static_cast<int64_t>(tokenizer.encode(t).size());
    double encode_s = timer.seconds();
    std::printf(
        "trained %lld merges on %lld bytes (%lld chunks, %lld unique) in %.2f s\n"
        "vocab size %d; training text: %lld tokens, %.3f bytes/token, encoded at %.1f MB/s\n"
        "wrote %s\n",
        static_cast<long long>(stats.merges), static_cast<long long>(stats.corpus_bytes),
        static_cast<long long>(stats.chunks), static_cast<long long>(stats.unique_chunks),
        stats.seconds, tokenizer.vocab_size(), static_cast<long long>(tokens),
        tokens ? static_cast<double>(stats.corpus_bytes) / tokens : 0.0,
        stats.corpus_bytes / 1e6 / std::max(encode_s, 1e-9), out.c_str());
    return 0;
  }

  const std::unique_ptr<data::TextTokenizer> loaded = data::load_text_tokenizer(tokenizer_path);
  const data::TextTokenizer& tokenizer = *loaded;
  if (*encode) {
    if (!text.empty() && !input.empty()) throw Error("pass either --text or --input, not both");
    std::string source = !input.empty()            ? data::read_file(input)
                         : encode->count("--text") ? text
                                                   : read_stdin();
    std::vector<int32_t> ids;
    auto special = [&](std::optional<int32_t> id, const char* what) {
      if (!id) {
        throw Error("tokenizer '" + tokenizer_path + "' has no document-" + what +
                    " token; drop --" + (what[0] == 'b' ? "bos" : "eos"));
      }
      return *id;
    };
    if (bos) ids.push_back(special(tokenizer.document_begin_id(), "begin"));
    tokenizer.encode_append(source, ids);
    if (eos) ids.push_back(special(tokenizer.document_end_id(), "end"));
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i > 0) line += ' ';
      line += std::to_string(ids[i]);
    }
    std::printf("%s\n", line.c_str());
    return 0;
  }
  std::string joined;
  for (const std::string& w : id_words) joined += w + " ";
  std::vector<int32_t> ids = parse_ids(id_words.empty() ? read_stdin() : joined);
  std::string bytes = tokenizer.decode(ids);
  std::fwrite(bytes.data(), 1, bytes.size(), stdout);
  return 0;
}

}  // namespace trillion::cli
