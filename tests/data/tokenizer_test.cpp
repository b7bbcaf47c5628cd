// Tokenizer: pre-tokenizer coverage, round trip over random bytes (invalid UTF-8, special-token
// lookalikes), training determinism and compression on real text (Brown), save/load, and clear
// errors for bad ids, bad files and vocab mismatches.
#include "data/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/philox.h"
#include "core/timer.h"
#include "data/file_io.h"
#include "data/pretokenize.h"

using namespace trillion;
using namespace trillion::data;
namespace fs = std::filesystem;

namespace {
// The first `bytes` of the bundled Brown corpus, cut at a line end (loaded once).
const std::string& brown_prefix() {
  static const std::string text = [] {
    std::string all = read_file(std::string(TRILLION_SOURCE_DIR) + "/data/brown.txt.gz");
    return all.substr(0, all.find('\n', 1'500'000) + 1);
  }();
  return text;
}

std::string random_bytes(const Philox& rng, uint64_t base, size_t length) {
  static const char* kPieces[] = {"<|bos|>", "<|eos|>",  "<|pad|>", "<|",
                                  "|>",      " the",     "'s",      "\n\n",
                                  "  ",      "\xff\xfe", "\xc3",    "\xe2\x82\xac"};
  std::string s;
  for (size_t i = 0; s.size() < length; ++i) {
    uint64_t r = rng.below(base + i, 300);
    if (r < 256) {
      s += static_cast<char>(r);
    } else {
      s += kPieces[r % 12];
    }
  }
  return s;
}

const Tokenizer& small_tokenizer() {
  static const Tokenizer tokenizer = [] {
    std::vector<std::string> texts = {brown_prefix().substr(0, 300'000)};
    return Tokenizer::train(texts, 600);
  }();
  return tokenizer;
}
}  // namespace

TEST(Pretokenize, SplitsLikeGpt2AndCoversInput) {
  std::vector<std::string_view> chunks = pretokenize("Hello world's  end,\n\n42 x!!");
  std::vector<std::string> expect = {"Hello", " world", "'s", " ",  " end", ",",
                                     "\n",    "\n",     "42", " x", "!!"};
  ASSERT_EQ(chunks.size(), expect.size());
  for (size_t i = 0; i < expect.size(); ++i) EXPECT_EQ(chunks[i], expect[i]) << i;
  std::string long_run(1000, 'a');
  for (std::string_view c : pretokenize(long_run)) EXPECT_LE(c.size(), kMaxChunkBytes);
}

TEST(Tokenizer, RoundTripsRandomBytes) {
  const Tokenizer& tok = small_tokenizer();
  Philox rng(99, "test.tokenizer.bytes");
  for (int trial = 0; trial < 300; ++trial) {
    std::string s = random_bytes(rng, trial * 1000, trial % 200);
    std::vector<int32_t> ids = tok.encode(s);
    for (int32_t id : ids) ASSERT_FALSE(tok.is_special(id)) << "encode emitted a special token";
    ASSERT_EQ(tok.decode(ids), s) << "trial " << trial;
  }
  EXPECT_TRUE(tok.encode("").empty());
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes += static_cast<char>(b);
  EXPECT_EQ(tok.decode(tok.encode(all_bytes + all_bytes)), all_bytes + all_bytes);
}

TEST(Tokenizer, SpecialTokensAreOnlyWhereCallersPutThem) {
  const Tokenizer& tok = small_tokenizer();
  EXPECT_EQ(tok.vocab_size(), 600);
  EXPECT_EQ(tok.bos_id(), 597);
  EXPECT_EQ(tok.eos_id(), 598);
  EXPECT_EQ(tok.pad_id(), 599);
  EXPECT_EQ(tok.token_bytes(tok.eos_id()), "<|eos|>");
  std::vector<int32_t> ids = tok.encode("a<|eos|>b");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok.eos_id()), 0);
  ids.push_back(tok.eos_id());
  EXPECT_EQ(tok.decode(ids), "a<|eos|>b<|eos|>");
}

TEST(Tokenizer, TrainingIsDeterministicAndCompressesRealText) {
  std::vector<std::string> texts = {brown_prefix()};
  BpeTrainStats stats;
  Tokenizer a = Tokenizer::train(texts, 2048, &stats);
  Tokenizer b = Tokenizer::train(texts, 2048);
  EXPECT_EQ(a.merges(), b.merges());
  EXPECT_EQ(stats.merges, 2048 - kMinVocabSize);
  EXPECT_EQ(a.vocab_size(), 2048);
  // Held-out text: the last part of the prefix is in training, so encode the next part too.
  std::string all = read_file(std::string(TRILLION_SOURCE_DIR) + "/data/brown.txt.gz");
  std::string held_out = all.substr(all.size() - 300'000);
  std::vector<int32_t> ids = a.encode(held_out);
  double bytes_per_token = static_cast<double>(held_out.size()) / ids.size();
  EXPECT_GT(bytes_per_token, 2.7) << "BPE with 2048 tokens should compress English > 2.7x";
  EXPECT_EQ(a.decode(ids), held_out);
  // The first merges of English text are frequent pairs such as "e " / " t" / "th".
  EXPECT_LE(a.token_bytes(256).size(), 2u);
}

TEST(Tokenizer, SavesAndLoads) {
  fs::path dir = fs::temp_directory_path() / ("trillion_tok_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string path = (dir / "tok.json").string();
  small_tokenizer().save(path);
  Tokenizer loaded = Tokenizer::load(path);
  EXPECT_EQ(loaded.merges(), small_tokenizer().merges());
  std::string text = brown_prefix().substr(0, 5000);
  EXPECT_EQ(loaded.encode(text), small_tokenizer().encode(text));

  auto load_error = [&](const std::string& contents) {
    std::ofstream((dir / "bad.json").string()) << contents;
    try {
      Tokenizer::load((dir / "bad.json").string());
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(load_error("{not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(load_error(R"({"format":"other"})").find("not a trillion-bpe"), std::string::npos);
  std::string m =
      load_error(R"({"format":"trillion-bpe","version":1,"vocab_size":260,"merges":[[300,1]]})");
  EXPECT_NE(m.find("merge 0 [300, 1]"), std::string::npos) << m;
  m = load_error(R"({"format":"trillion-bpe","version":1,"vocab_size":999,"merges":[[1,2]]})");
  EXPECT_NE(m.find("vocab_size 999"), std::string::npos) << m;
  try {
    Tokenizer::load((dir / "missing.json").string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.json"), std::string::npos);
  }
  fs::remove_all(dir);
}

TEST(Tokenizer, BadIdsAndVocabMismatchAreClearErrors) {
  const Tokenizer& tok = small_tokenizer();
  std::vector<int32_t> ids = {1, 600};
  try {
    tok.decode(ids);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 600"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(check_tokenizer_matches(tok, "tok.json", 600, "shard 'x.bin'"));
  try {
    check_tokenizer_matches(tok, "tok.json", 4096, "shard 'x.bin'");
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("tok.json"), std::string::npos);
    EXPECT_NE(m.find("x.bin"), std::string::npos);
    EXPECT_NE(m.find("4096"), std::string::npos);
  }
  EXPECT_THROW(Tokenizer::train(std::vector<std::string>{"abc"}, 100), Error);
}
