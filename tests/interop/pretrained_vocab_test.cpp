// Models with an existing tokenizer's vocabulary, end to end: GPT-2's (50,257 ids, from its
// tokenizer.json) on Brown, and a Llama 3-sized one (128,256 ids from tiktoken ranks: GPT-2's
// 50,256 ranks, frequent Brown words as tokens at ranks past 65,535, filler up to 128,000, Llama
// 3's regex and specials), which needs 4-byte token shards. Each is prepared, trained a few
// steps and exported with its tokenizer.json; the exported tokenizer.json encodes as the
// original does (and, where .venv-tests exists, Hugging Face tokenizers and tiktoken agree).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "../data/gpt2_fixture.h"
#include "../train/cli_util.h"
#include "data/file_io.h"
#include "data/regex_split.h"
#include "data/shard.h"
#include "data/text_tokenizer.h"

namespace trillion {
namespace {

using testing::run_trillion;

// The first ~`bytes` of the bundled Brown corpus, cut at a line end.
std::string brown_prefix(size_t bytes) {
  const std::string all = data::read_file(std::string(TRILLION_SOURCE_DIR) + "/data/brown.txt.gz");
  return all.substr(0, all.find('\n', bytes) + 1);
}

// prepare -> train `steps` steps of configs/tiny.toml with the tokenizer's vocabulary -> export
// (safetensors + tokenizer.json). Returns the export directory.
std::string prepare_train_export(const std::string& root, const std::string& tokenizer, int vocab) {
  data::write_file_atomic(root + "/brown.txt", {brown_prefix(120'000)});
  auto r = run_trillion("data prepare --progress off --tokenizer " + tokenizer + " --out " + root +
                        "/data " + root + "/brown.txt");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = run_trillion("train " + testing::config_path("tiny.toml") + " --run-dir " + root +
                   "/run --quiet --set model.vocab_size=" + std::to_string(vocab) +
                   " --set data.source=shards --set data.path=" + root +
                   "/data --set train.steps=3 --set train.eval_batches=2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const auto summary = nlohmann::json::parse(testing::slurp(root + "/run/summary.json"));
  const double loss = summary["final_val_loss"].get<double>();
  EXPECT_TRUE(std::isfinite(loss) && loss < std::log(vocab) + 1.0) << loss;
  r = run_trillion("export --checkpoint " + root + "/run --format safetensors --out " + root +
                   "/hf --tokenizer " + tokenizer);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const auto config = nlohmann::json::parse(testing::slurp(root + "/hf/config.json"));
  EXPECT_EQ(config["vocab_size"], vocab);
  return root + "/hf";
}

// Ranks for a 128,256-id vocabulary whose ids past 65,535 occur in Brown text (see the top).
std::string write_llama3_sized_ranks(const std::string& path) {
  const auto gpt2 = data::load_text_tokenizer(test::write_gpt2_tiktoken());
  std::vector<std::string> by_rank(50256);
  for (int32_t id = 0; id < 50256; ++id) by_rank[id] = gpt2->decode(std::vector<int32_t>{id});
  auto filler = [](size_t n) {  // 0xF8 never occurs in UTF-8 text
    return std::string{'\xf8', static_cast<char>(0x80 + n % 64),
                       static_cast<char>(0x80 + n / 64 % 64),
                       static_cast<char>(0x80 + n / 4096 % 64)};
  };
  while (by_rank.size() < 65536) by_rank.push_back(filler(by_rank.size()));
  std::set<std::string> words;
  data::split_pieces(data::SplitPattern::kLlama3, brown_prefix(120'000), [&](std::string_view p) {
    if (p.size() < 4 || p[0] != ' ' || words.size() >= 3000) return;
    for (char c : p.substr(1))
      if (!std::isalpha(static_cast<unsigned char>(c))) return;
    if (gpt2->encode(p).size() == 2 && words.insert(std::string(p)).second) by_rank.emplace_back(p);
  });
  while (by_rank.size() < 128000) by_rank.push_back(filler(by_rank.size()));
  std::string text;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    text += test::base64(by_rank[r]) + " " + std::to_string(r) + "\n";
  }
  data::write_file_atomic(path, {text});
  return path;
}

TEST(PretrainedVocabulary, Gpt2ModelTrainsOnBrownAndExportsItsTokenizerJson) {
  const std::string root = testing::fresh_dir("gpt2_brown");
  std::filesystem::create_directories(root);
  const std::string tokenizer = test::write_gpt2_tokenizer_json();
  const std::string hf = prepare_train_export(root, tokenizer, 50257);
  EXPECT_EQ(data::read_shard_info(root + "/data/train.bin").token_bytes, 2u);
  EXPECT_EQ(testing::slurp(hf + "/tokenizer.json"), testing::slurp(tokenizer));
  const auto config = nlohmann::json::parse(testing::slurp(hf + "/config.json"));
  EXPECT_EQ(config["eos_token_id"], 50256);
}

TEST(PretrainedVocabulary, Llama3SizedVocabularyUsesFourByteTokensThroughExport) {
  const std::string root = testing::fresh_dir("llama3_sized");
  std::filesystem::create_directories(root);
  const std::string ranks = write_llama3_sized_ranks(root + "/llama3-sized.tiktoken");
  const auto tok = data::load_text_tokenizer(ranks);
  ASSERT_EQ(tok->vocab_size(), 128256);
  EXPECT_EQ(tok->document_end_id(), 128001);
  EXPECT_EQ(tok->document_begin_id(), 128000);
  const std::string hf = prepare_train_export(root, ranks, 128256);

  const data::ShardInfo info = data::read_shard_info(root + "/data/train.bin");
  EXPECT_EQ(info.token_bytes, 4u);
  EXPECT_EQ(info.vocab_size, 128256);
  data::ShardDataset shard({root + "/data/train.bin"});
  std::vector<int32_t> ids(info.num_tokens);
  shard.read_tokens(0, 0, info.num_tokens, ids.data());
  int64_t wide = 0;
  for (int32_t id : ids) wide += id >= 65536 && id < 128000;
  EXPECT_GT(wide, 100);  // ids that need 4 bytes made it through prepare
  EXPECT_EQ(ids.back(), 128001);

  // The exported tokenizer.json (converted from the ranks) encodes Brown as the ranks do.
  const auto config = nlohmann::json::parse(testing::slurp(hf + "/config.json"));
  EXPECT_EQ(config["bos_token_id"], 128000);
  EXPECT_EQ(config["eos_token_id"], 128001);
  const auto exported = data::load_text_tokenizer(hf + "/tokenizer.json");
  EXPECT_EQ(exported->vocab_size(), 128256);
  const std::string text = brown_prefix(30'000);
  EXPECT_EQ(exported->encode(text), tok->encode(text));

  // Hugging Face tokenizers on the exported file, and tiktoken on the ranks, agree line by line.
  const std::string python = std::string(TRILLION_SOURCE_DIR) + "/.venv-tests/bin/python";
  if (std::system((python + " -c 'import tokenizers, tiktoken' 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << "tokenizers/tiktoken not installed in " << python << " (scripts/setup.sh)";
  }
  std::vector<std::string> lines;
  for (size_t start = 0; start < text.size() && lines.size() < 400;) {
    const size_t end = text.find('\n', start);
    lines.push_back(text.substr(start, end - start + 1));
    start = end + 1;
  }
  nlohmann::json specials = nlohmann::json::object();
  for (int32_t id = 128000; id < 128256; ++id) specials[tok->decode(std::vector<int32_t>{id})] = id;
  const nlohmann::json job = {
      {"texts", lines},
      {"hf", {hf + "/tokenizer.json"}},
      {"tiktoken",
       {{{"path", ranks},
         {"pattern", data::split_pattern_regex(data::SplitPattern::kLlama3)},
         {"specials", specials}}}}};
  data::write_file_atomic(root + "/job.json", {job.dump()});
  ASSERT_EQ(
      std::system((python + " " + TRILLION_SOURCE_DIR + "/tests/data/tokenizer_reference.py " +
                   root + "/job.json " + root + "/ids.json")
                      .c_str()),
      0);
  const auto ref = nlohmann::json::parse(testing::slurp(root + "/ids.json"));
  for (const std::string& path : {hf + "/tokenizer.json", ranks}) {
    int mismatches = 0;
    for (size_t i = 0; i < lines.size(); ++i) {
      mismatches += tok->encode(lines[i]) != ref.at(path)[i].get<std::vector<int32_t>>();
    }
    EXPECT_EQ(mismatches, 0) << path;
  }
}

}  // namespace
}  // namespace trillion
