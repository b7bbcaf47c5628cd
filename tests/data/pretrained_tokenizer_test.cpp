// Existing tokenizers behind data::TextTokenizer: GPT-2's published files as a Hugging Face
// tokenizer.json and as tiktoken ranks give exactly the reference encodings (every one of the
// 1,996 fixture strings), the GPT-2 and Llama 3 pre-tokenizer regexes cut text where the regex
// engines do, Hugging Face `tokenizers` and `tiktoken` themselves agree on the fixtures and on
// generated text (when scripts/setup.sh made .venv-tests), and unsupported files fail clearly.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/philox.h"
#include "data/byte_level.h"
#include "data/file_io.h"
#include "data/ranked_bpe.h"
#include "data/regex_split.h"
#include "data/text_tokenizer.h"
#include "gpt2_fixture.h"

using namespace trillion;
using namespace trillion::data;
using trillion::test::gpt2_references;
using trillion::test::gpt2_work_dir;

namespace {
std::vector<std::string> pieces(SplitPattern pattern, std::string_view text) {
  std::vector<std::string> out;
  split_pieces(pattern, text, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}

const TextTokenizer& gpt2_json() {
  static const auto tokenizer = load_text_tokenizer(trillion::test::write_gpt2_tokenizer_json());
  return *tokenizer;
}

void expect_all_references(const TextTokenizer& tokenizer) {
  int mismatches = 0;
  for (const auto& [text, ids] : gpt2_references()) {
    const std::vector<int32_t> got = tokenizer.encode(text);
    if (got != ids && ++mismatches <= 5) ADD_FAILURE() << "text: " << nlohmann::json(text).dump();
    if (got == ids) {
      EXPECT_EQ(tokenizer.decode(got), text);
    }
  }
  EXPECT_EQ(mismatches, 0);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Strings that exercise the regex classes: contractions in both cases, digit runs, Unicode
// letters, numbers (Nd, Nl, No) and marks, white space of every kind, emoji, special-token text.
std::vector<std::string> generated_texts(int count) {
  static const char* kPieces[] = {"Hello",
                                  " world",
                                  "'s",
                                  "'S",
                                  "'ll",
                                  "'LL",
                                  "'Re",
                                  "'ve",
                                  " ",
                                  "  ",
                                  "\t",
                                  "\n",
                                  "\r\n",
                                  "\n\n",
                                  "   \n  ",
                                  "123",
                                  "4567890",
                                  "3.14",
                                  "!!",
                                  "?!",
                                  "...",
                                  "(x)",
                                  "caf\xc3\xa9",
                                  "na\xc3\xafve",
                                  "\xe6\x9d\xb1\xe4\xba\xac",
                                  "\xd0\x9c\xd0\xbe\xd1\x81",
                                  "\xf0\x9f\xa4\x96",
                                  "\xc2\xa0",
                                  "\xe3\x80\x80",
                                  "\xc5\xbf",
                                  "\xd9\xa1\xd9\xa2\xd9\xa3",
                                  "\xe2\x85\xab",
                                  "\xc2\xbd",
                                  "e\xcc\x81",
                                  "\xe2\x80\x8b",
                                  "<|endoftext|>",
                                  " don't",
                                  "x",
                                  "_",
                                  "-",
                                  "$100",
                                  "\x0b",
                                  "\x0c",
                                  "\r",
                                  " \t ",
                                  "A",
                                  "zz"};
  constexpr int kCount = sizeof(kPieces) / sizeof(kPieces[0]);
  Philox rng(7, "test.pretrained_tokenizer.texts");
  std::vector<std::string> texts;
  for (int t = 0; t < count; ++t) {
    std::string s;
    const int n = 1 + static_cast<int>(rng.below(2 * t, 14));
    for (int k = 0; k < n; ++k) s += kPieces[rng.below(2 * t + 1 + 1000003ull * k, kCount)];
    texts.push_back(s);
  }
  return texts;
}

std::string venv_python() {
  return std::string(TRILLION_SOURCE_DIR) + "/.venv-tests/bin/python";
}

// The ids tests/data/tokenizer_reference.py (Hugging Face tokenizers, tiktoken) gives for `job`
// ({"texts", "hf": [paths], "tiktoken": [{"path", "pattern", "specials"}]}), per path; null (and
// a test failure) when the script fails.
nlohmann::json reference_ids(const nlohmann::json& job, const std::string& name) {
  const std::string job_path = gpt2_work_dir() + "/" + name + "_job.json",
                    out = gpt2_work_dir() + "/" + name + "_ids.json";
  write_file_atomic(job_path, {job.dump()});
  const int rc = std::system((venv_python() + " " + TRILLION_SOURCE_DIR +
                              "/tests/data/tokenizer_reference.py " + job_path + " " + out)
                                 .c_str());
  if (rc != 0) {
    ADD_FAILURE() << "tokenizer_reference.py failed (" << rc << ")";
    return nullptr;
  }
  return nlohmann::json::parse(read_file(out));
}

// How many of `texts` `tokenizer` encodes to other ids than `ids` (the first three are reported,
// named by `label`); the equal ones must decode back to their text. *tokens: the ids compared.
int mismatches(const TextTokenizer& tokenizer, const std::vector<std::string>& texts,
               const nlohmann::json& ids, const std::string& label, int64_t* tokens = nullptr) {
  if (!ids.is_array() || ids.size() != texts.size()) {
    ADD_FAILURE() << label << ": " << (ids.is_array() ? ids.size() : 0) << " reference rows for "
                  << texts.size() << " texts";
    return static_cast<int>(texts.size());
  }
  int count = 0;
  for (size_t t = 0; t < texts.size(); ++t) {
    const auto want = ids[t].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tokenizer.encode(texts[t]);
    if (tokens != nullptr) *tokens += static_cast<int64_t>(want.size());
    if (got != want) {
      if (++count <= 3) ADD_FAILURE() << label << ": " << nlohmann::json(texts[t]).dump();
    } else {
      EXPECT_EQ(tokenizer.decode(got), texts[t]) << label;
    }
  }
  return count;
}
}  // namespace

TEST(PretrainedTokenizer, Gpt2TokenizerJsonGivesEveryReferenceEncoding) {
  const TextTokenizer* tokenizer = &gpt2_json();
  EXPECT_EQ(tokenizer->format(), "hf-tokenizer.json");
  EXPECT_EQ(tokenizer->vocab_size(), 50257);
  EXPECT_EQ(tokenizer->document_end_id(), 50256);
  EXPECT_EQ(tokenizer->encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  expect_all_references(*tokenizer);
}

TEST(PretrainedTokenizer, Gpt2TiktokenRanksGiveEveryReferenceEncoding) {
  const auto tokenizer = load_text_tokenizer(trillion::test::write_gpt2_tiktoken());
  EXPECT_EQ(tokenizer->format(), "tiktoken");
  EXPECT_EQ(tokenizer->vocab_size(), 50257);
  EXPECT_EQ(tokenizer->document_end_id(), 50256);
  EXPECT_EQ(tokenizer->decode(std::vector<int32_t>{50256}), "<|endoftext|>");
  expect_all_references(*tokenizer);
}

TEST(PretrainedTokenizer, SplitPatternsCutTextWhereTheRegexesDo) {
  using V = std::vector<std::string>;
  const SplitPattern g = SplitPattern::kGpt2, l = SplitPattern::kLlama3;
  EXPECT_EQ(pieces(g, "a  \n\n b"), (V{"a", "  \n\n", " b"}));
  EXPECT_EQ(pieces(l, "a  \n\n b"), (V{"a", "  \n\n", " b"}));
  EXPECT_EQ(pieces(g, "x!!\n\ny"), (V{"x", "!!", "\n", "\n", "y"}));
  EXPECT_EQ(pieces(l, "x!!\n\ny"), (V{"x", "!!\n\n", "y"}));
  EXPECT_EQ(pieces(g, "12345 I'M"), (V{"12345", " I", "'", "M"}));
  EXPECT_EQ(pieces(l, "12345 I'M"), (V{"123", "45", " I", "'M"}));
  EXPECT_EQ(pieces(l, "\tfoo end   "), (V{"\tfoo", " end", "   "}));
  EXPECT_EQ(pieces(g, "\tfoo end   "), (V{"\t", "foo", " end", "   "}));
  EXPECT_EQ(pieces(l, "!hello"), (V{"!hello"}));
  EXPECT_EQ(pieces(g, "caf\xc3\xa9 \xe6\x9d\xb1"), (V{"caf\xc3\xa9", " \xe6\x9d\xb1"}));
  // Bytes that are not UTF-8 are one "other" code point each; pieces still cover the input.
  EXPECT_EQ(pieces(g, "a\xff\xfe b"), (V{"a", "\xff\xfe", " b"}));
  EXPECT_EQ(split_pattern_from_regex(split_pattern_regex(l)), l);
  EXPECT_EQ(split_pattern_from_regex("\\w+"), std::nullopt);
}

// Any bytes (invalid UTF-8, NULs, lone continuation bytes, special-token text) split into pieces
// that cover them exactly and encode to ids that decode back to them, with both regexes.
TEST(PretrainedTokenizer, AnyBytesRoundTrip) {
  const TextTokenizer* gpt2 = &gpt2_json();
  Philox rng(3, "test.pretrained_tokenizer.bytes");
  for (int t = 0; t < 300; ++t) {
    std::string s;
    const int n = static_cast<int>(rng.below(3 * t, 80));
    for (int k = 0; k < n; ++k) {
      const uint64_t r = rng.below(3 * t + 1 + 7919ull * k, 300);
      s += r < 256 ? std::string(1, static_cast<char>(r)) : std::string(r < 280 ? " " : "\n");
    }
    for (SplitPattern pattern : {SplitPattern::kGpt2, SplitPattern::kLlama3}) {
      std::string joined;
      for (const std::string& piece : pieces(pattern, s)) {
        ASSERT_FALSE(piece.empty());
        joined += piece;
      }
      ASSERT_EQ(joined, s);
    }
    ASSERT_EQ(gpt2->decode(gpt2->encode(s)), s) << t;
  }
}

TEST(PretrainedTokenizer, UnsupportedFilesFailClearly) {
  const std::string dir = gpt2_work_dir();
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name, std::ios::binary) << text;
    return dir + "/" + name;
  };
  EXPECT_NE(error_of([&] {
              load_text_tokenizer(write("n.json", R"({"model": {"type": "BPE", "vocab": {},
                "merges": []}, "normalizer": {"type": "NFC"}, "pre_tokenizer": null})"));
            }).find("no token for byte 0x00"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              load_text_tokenizer(write("u.json", R"({"model": {"type": "Unigram"}})"));
            }).find("model type Unigram is not BPE"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              load_text_tokenizer(write("t.tiktoken", "IQ== 0\nnot-a-line\n"));
            }).find("t.tiktoken' line 2 is not"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              load_text_tokenizer(write("b.tiktoken", "IQ== 0\n"));
            }).find("no rank for the byte 0x00"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              load_text_tokenizer(write("j.json", "{\"x\": 1}"));
            }).find("neither a trillion tokenizer"),
            std::string::npos);
  // A pre-tokenizer regex this code does not implement is named.
  nlohmann::json split = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"Regex", "\\w+"}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level_char(static_cast<unsigned char>(b))] = b;
  const nlohmann::json bytes_only = {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
      {"pre_tokenizer", split}};
  const std::string path = write("w.json", bytes_only.dump());
  EXPECT_NE(error_of([&] { load_text_tokenizer(path); }).find("is not one this code implements"),
            std::string::npos);
}

// Hugging Face tokenizers and tiktoken themselves (from PyPI, in .venv-tests) encode the fixture
// strings and generated text; trillion must give the same ids for GPT-2's tokenizer.json, GPT-2's
// vocabulary under Llama 3's Split regex with ignore_merges (Llama 3's tokenizer.json shape), and
// GPT-2's tiktoken ranks.
TEST(PretrainedTokenizer, MatchesHuggingFaceTokenizersAndTiktoken) {
  const std::string python = venv_python();
  if (std::system((python + " -c 'import tokenizers, tiktoken' 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << "Hugging Face tokenizers and tiktoken are not installed in " << python
                 << " (scripts/setup.sh creates .venv-tests with them)";
  }
  nlohmann::json llama3_split = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"Regex", split_pattern_regex(SplitPattern::kLlama3)}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"},
         {"add_prefix_space", false},
         {"trim_offsets", true},
         {"use_regex", false}}}}};
  const std::string gpt2 = trillion::test::write_gpt2_tokenizer_json();
  const std::string llama3 =
      trillion::test::write_gpt2_tokenizer_json("gpt2-llama3-split.json", llama3_split, true);
  const std::string ranks = trillion::test::write_gpt2_tiktoken();
  std::vector<std::string> texts = generated_texts(400);
  for (size_t i = 0; i < gpt2_references().size(); i += 4)
    texts.push_back(gpt2_references()[i].first);
  nlohmann::json job = {{"texts", texts},
                        {"hf", {gpt2, llama3}},
                        {"tiktoken",
                         {{{"path", ranks},
                           {"pattern", split_pattern_regex(SplitPattern::kGpt2)},
                           {"specials", {{"<|endoftext|>", 50256}}}}}}};
  const nlohmann::json ref = reference_ids(job, "gpt2");
  for (const std::string& path : {gpt2, llama3, ranks}) {
    const nlohmann::json ids = ref.is_object() ? ref.value(path, nlohmann::json()) : nullptr;
    EXPECT_EQ(mismatches(*load_text_tokenizer(path), texts, ids, path), 0) << path;
  }
}

// Llama 3's published tokenizer.model (scripts/setup.sh takes it from Meta's llama-models wheel on
// PyPI into .venv-tests): its 128,000 ranks and 256 special tokens load as Llama 3's tokenizer, and
// every fixture string and generated text encodes to tiktoken's ids under the pattern Meta's own
// tokenizer.py gives (copied here as the reference, apart from trillion's regex_split.cpp).
TEST(PretrainedTokenizer, Llama3TokenizerModelMatchesTiktoken) {
  const std::string venv = std::string(TRILLION_SOURCE_DIR) + "/.venv-tests";
  const std::string python = venv_python(), model = venv + "/llama3/tokenizer.model";
  if (!std::filesystem::exists(model) ||
      std::system((python + " -c 'import tiktoken' 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << model << " or tiktoken is missing (scripts/setup.sh fetches them from PyPI)";
  }
  const auto tokenizer = load_text_tokenizer(model);
  EXPECT_EQ(tokenizer->vocab_size(), 128256);
  EXPECT_EQ(tokenizer->document_begin_id(), 128000);  // <|begin_of_text|>
  EXPECT_EQ(tokenizer->document_end_id(), 128001);    // <|end_of_text|>
  const std::vector<int32_t> specials = {128000, 128001, 128006, 128007, 128009};
  EXPECT_EQ(tokenizer->decode(specials),
            "<|begin_of_text|><|end_of_text|><|start_header_id|><|end_header_id|><|eot_id|>");
  std::vector<std::string> texts = generated_texts(400);
  for (const auto& [text, ids] : gpt2_references()) texts.push_back(text);
  const char* meta_pattern =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const nlohmann::json job = {
      {"texts", texts},
      {"tiktoken",
       {{{"path", model}, {"pattern", meta_pattern}, {"specials", nlohmann::json::object()}}}}};
  const nlohmann::json ref = reference_ids(job, "llama3");
  int64_t tokens = 0;
  EXPECT_EQ(
      mismatches(*tokenizer, texts, ref.is_object() ? ref.value(model, nlohmann::json()) : nullptr,
                 model, &tokens),
      0);
  EXPECT_GT(tokens, 10000);  // the texts are not trivially short
}

// byte_fallback, as Hugging Face's BPE applies it: GPT-2's tokenizer.json without the byte-level
// tokens of four bytes (space 'Ġ', newline 'Ċ', 'A', 0xE9 'é'; merges naming them dropped) and
// with <0x00>..<0xFF> appended encodes each of those bytes as the <0xXX> tokens of its byte-level
// character's UTF-8 bytes ('Ġ' = C4 A0 -> <0xC4> <0xA0>), decodes them back to the text, and
// gives Hugging Face tokenizers' ids on the generated and fixture texts (when .venv-tests has it).
TEST(PretrainedTokenizer, ByteFallbackEncodesAsHuggingFaceDoes) {
  nlohmann::json j = nlohmann::json::parse(read_file(trillion::test::write_gpt2_tokenizer_json()));
  const std::vector<std::string> removed = {byte_level_char(0x20), byte_level_char(0x0A),
                                            byte_level_char(0x41), byte_level_char(0xE9)};
  nlohmann::json& vocab = j["model"]["vocab"];
  for (const std::string& symbol : removed) ASSERT_EQ(vocab.erase(symbol), 1u) << symbol;
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& m : j["model"]["merges"]) {
    const std::string rule = m.get<std::string>();
    const std::string left = rule.substr(0, rule.find(' ')),
                      right = rule.substr(rule.find(' ') + 1);
    if (std::find(removed.begin(), removed.end(), left) == removed.end() &&
        std::find(removed.begin(), removed.end(), right) == removed.end())
      merges.push_back(rule);
  }
  j["model"]["merges"] = merges;
  constexpr int32_t kFirst = 50257;  // <0x00>
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = kFirst + b;
  j["model"]["byte_fallback"] = true;
  j["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "ByteFallback"}}, j["decoder"]}}};
  const std::string path = gpt2_work_dir() + "/gpt2-byte-fallback.json";
  write_file_atomic(path, {j.dump()});
  const auto tokenizer = load_text_tokenizer(path);
  EXPECT_EQ(tokenizer->encode("A"), (std::vector<int32_t>{kFirst + 0x41}));
  EXPECT_EQ(tokenizer->encode(" "), (std::vector<int32_t>{kFirst + 0xC4, kFirst + 0xA0}));
  EXPECT_EQ(tokenizer->encode("\n"), (std::vector<int32_t>{kFirst + 0xC4, kFirst + 0x8A}));
  EXPECT_EQ(tokenizer->encode("\xe9"), (std::vector<int32_t>{kFirst + 0xC3, kFirst + 0xA9}));
  EXPECT_EQ(tokenizer->decode(std::vector<int32_t>{kFirst + 0xC4, kFirst + 0xA0, kFirst + 0x41}),
            " A");
  std::vector<std::string> texts = generated_texts(400);
  for (size_t i = 0; i < gpt2_references().size(); i += 4)
    texts.push_back(gpt2_references()[i].first);
  texts.push_back("A cat\nAte \xe9\x9b\xbb  A\n\nAA");
  for (const std::string& text : texts) EXPECT_EQ(tokenizer->decode(tokenizer->encode(text)), text);
  const std::string python = venv_python();
  if (std::system((python + " -c 'import tokenizers' 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "Hugging Face tokenizers is not installed in " << python;
  const nlohmann::json job = {{"texts", texts}, {"hf", {path}}};
  const nlohmann::json ref = reference_ids(job, "fallback");
  EXPECT_EQ(mismatches(*tokenizer, texts,
                       ref.is_object() ? ref.value(path, nlohmann::json()) : nullptr, path),
            0);
}
