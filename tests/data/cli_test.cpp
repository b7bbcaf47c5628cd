// The `trillion tokenizer` and `trillion data` commands end to end (through the built binary):
// synth shards equal the in-memory source token for token, prepare/inspect/encode/decode agree,
// and bad inputs exit non-zero with a clear message while existing outputs stay intact.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "../train/cli_util.h"
#include "data/file_io.h"
#include "data/loader.h"
#include "data/markov.h"
#include "data/shard.h"
#include "data/source.h"
#include "data/tokenizer.h"

using namespace trillion;
using namespace trillion::data;
using trillion::testing::has;
using trillion::testing::slurp;
namespace fs = std::filesystem;

namespace {
struct Result {
  int status;
  std::string output;  // stdout and stderr
};

Result run(const std::string& args) {
  const auto r = trillion::testing::run_trillion(args);
  return {r.exit_code, r.output};
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("trillion_cli_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string p(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

}  // namespace

TEST_F(CliTest, SynthShardsEqualTheInMemorySource) {
  Result r =
      run("data synth --kind markov --order 2 --vocab 16 --tokens 20000 --val-tokens 3000 "
          "--seed 9 --out " +
          p("mk"));
  ASSERT_EQ(r.status, 0) << r.output;
  MarkovSpec spec{.order = 2, .vocab = 16, .seed = 9, .tokens = 20000, .val_tokens = 3000};
  EXPECT_TRUE(has(r.output, std::to_string(MarkovChain(2, 16, 9).entropy_rate()).substr(0, 6)))
      << r.output;
  for (Split split : {Split::kTrain, Split::kValidation}) {
    DataSpec shards, markov;
    shards.source = "shards";
    shards.path = p("mk");
    markov.markov = spec;
    auto from_file = open_dataset(shards, split);
    auto in_memory = open_dataset(markov, split);
    ASSERT_EQ(from_file->num_tokens(), in_memory->num_tokens());
    EXPECT_EQ(from_file->entropy_rate().value(), in_memory->entropy_rate().value());
    DataLoader a(from_file, 32, 4), b(in_memory, 32, 4);
    std::vector<int32_t> xa(32 * 8), ya(32 * 8), xb(32 * 8), yb(32 * 8);
    a.batch(100, 8, xa.data(), ya.data());
    b.batch(100, 8, xb.data(), yb.data());
    EXPECT_EQ(xa, xb);
    EXPECT_EQ(ya, yb);
  }
  Result inspect = run("data inspect " + p("mk/train.bin") + " --count 5");
  EXPECT_EQ(inspect.status, 0);
  EXPECT_TRUE(has(inspect.output, "tokens       20000") && has(inspect.output, "entropy_rate"))
      << inspect.output;
}

TEST_F(CliTest, TokenizerAndPrepareEndToEnd) {
  {
    std::ofstream a(p("a.txt")), b(p("b.txt"));
    for (int i = 0; i < 200; ++i)
      a << "The quick brown fox jumps over the lazy dog " << i << ".\n\n";
    b << "Another document, with <|eos|> in it and caf\xc3\xa9.\n";
  }
  Result r = run("tokenizer train --vocab 300 --out " + p("tok.json") + " " + p("a.txt") + " " +
                 p("b.txt"));
  ASSERT_EQ(r.status, 0) << r.output;
  Tokenizer tok = Tokenizer::load(p("tok.json"));
  EXPECT_EQ(tok.vocab_size(), 300);
  r = run("tokenizer encode --tokenizer " + p("tok.json") + " --bos --text 'the fox'");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.substr(0, r.output.find(' ')), std::to_string(tok.bos_id()));
  Result d = run("tokenizer decode --tokenizer " + p("tok.json") + " " + r.output);
  EXPECT_EQ(d.output, "<|bos|>the fox");

  r = run("data prepare --tokenizer " + p("tok.json") + " --val-fraction 0.1 --out " + p("ds") +
          " " + p("a.txt") + " " + p("b.txt"));
  ASSERT_EQ(r.status, 0) << r.output;
  auto train = open_shard_dataset(p("ds"), Split::kTrain);
  auto val = open_shard_dataset(p("ds"), Split::kValidation);
  EXPECT_EQ(train->vocab_size(), 300);
  EXPECT_GT(val->num_tokens(), 0);
  ASSERT_TRUE(train->bytes_per_token().has_value());
  EXPECT_GT(*train->bytes_per_token(), 1.0);  // BPE merged something
  EXPECT_LT(*train->bytes_per_token(), 10.0);
  // Every document ends with <|eos|>; decoding all tokens gives back the documents' text.
  std::vector<int32_t> ids(train->num_tokens());
  train->read_tokens(0, 0, train->num_tokens(), ids.data());
  EXPECT_EQ(ids.back(), tok.eos_id());
  EXPECT_TRUE(has(tok.decode(ids), " lazy dog 17.<|eos|>The quick") ||
              has(tok.decode(ids), " lazy dog 18.<|eos|>The quick"));
  Result inspect = run("data inspect " + p("ds/val.bin") + " --tokenizer " + p("tok.json"));
  EXPECT_EQ(inspect.status, 0) << inspect.output;
  EXPECT_TRUE(has(inspect.output, "decoded")) << inspect.output;
}

TEST_F(CliTest, BadInputsFailClearlyAndLeaveFilesIntact) {
  ASSERT_EQ(run("data synth --order 1 --vocab 8 --tokens 1000 --out " + p("mk")).status, 0);
  std::string before = slurp(p("mk/train.bin"));

  Result r = run("data synth --order 1 --vocab 1 --tokens 1000 --out " + p("mk"));
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.output, "vocab = 1")) << r.output;
  r = run("data inspect " + p("missing.bin"));
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.output, "missing.bin")) << r.output;
  r = run("data prepare --overwrite --tokenizer " + p("no_tok.json") + " --out " + p("mk") + " " +
          p("x.txt"));
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.output, "no_tok.json")) << r.output;

  // A truncated copy is reported; the original is untouched by all of the above.
  std::string truncated = before.substr(0, before.size() / 2);
  std::ofstream(p("t.bin"), std::ios::binary) << truncated;
  r = run("data inspect " + p("t.bin"));
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.output, "truncated")) << r.output;
  EXPECT_EQ(slurp(p("mk/train.bin")), before);

  // Tokenizer/data vocab mismatch.
  { std::ofstream(p("a.txt")) << "some text for a tokenizer, some text again\n"; }
  ASSERT_EQ(run("tokenizer train --vocab 270 --out " + p("tok.json") + " " + p("a.txt")).status, 0);
  r = run("data inspect " + p("mk/train.bin") + " --tokenizer " + p("tok.json"));
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.output, "vocabulary mismatch")) << r.output;
  const int vocab = Tokenizer::load(p("tok.json")).vocab_size();  // <= 270: tiny corpus
  r = run("tokenizer decode --tokenizer " + p("tok.json") + " 5 9999");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.output, "token id 9999")) << r.output;
  r = run("tokenizer train --vocab 100 --out " + p("tok.json") + " " + p("a.txt"));
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(Tokenizer::load(p("tok.json")).vocab_size(), vocab);  // the old file is intact
}

// Issue 19's data-command cases: each one clear error (exit 2, never 3), nothing overwritten.
TEST_F(CliTest, OutOfRangeValuesAndExistingOutputsAreClearErrors) {
  ASSERT_EQ(run("data synth --order 1 --vocab 8 --tokens 1000 --out " + p("mk")).status, 0);
  const std::string before = slurp(p("mk/train.bin"));
  for (const std::string option : {"--count -5", "--count 0", "--offset -1"}) {
    Result r = run("data inspect " + p("mk/train.bin") + " " + option);
    EXPECT_EQ(r.status, 2) << option << ": " << r.output;  // --count -5 was exit 3 (length_error)
    EXPECT_TRUE(has(r.output, option.substr(0, option.find(' ')) + ":")) << r.output;
  }
  Result r = run("data inspect " + p("mk/train.bin") + " --offset 1000");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.output, "--offset 1000 is past the end of the shard (1000 tokens)"))
      << r.output;

  // An existing output is not replaced without --overwrite (synth and prepare).
  r = run("data synth --order 1 --vocab 8 --tokens 2000 --seed 5 --out " + p("mk"));
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.output, "'" + p("mk/train.bin") + "' already exists; pass --overwrite"))
      << r.output;
  EXPECT_EQ(slurp(p("mk/train.bin")), before);
  { std::ofstream(p("a.txt")) << "one document\n\nanother document\n\na third one here\n"; }
  ASSERT_EQ(run("tokenizer train --vocab 270 --out " + p("tok.json") + " " + p("a.txt")).status, 0);
  r = run("data prepare --tokenizer " + p("tok.json") + " --out " + p("mk") + " " + p("a.txt"));
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.output, "already exists; pass --overwrite")) << r.output;
  EXPECT_EQ(slurp(p("mk/train.bin")), before);
  r = run("data prepare --overwrite --tokenizer " + p("tok.json") + " --out " + p("mk") + " " +
          p("a.txt"));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(slurp(p("mk/train.bin")), before);

  // --sharpness 1e308 once wrote shards with a null entropy rate that nothing could read.
  r = run("data synth --order 1 --vocab 8 --tokens 1000 --sharpness 1e308 --out " + p("sharp"));
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.output, "use sharpness <= 50")) << r.output;
  EXPECT_FALSE(fs::exists(p("sharp/train.bin")));
  r = run("data synth --order 1 --vocab 8 --tokens 1000 --sharpness nan --out " + p("sharp"));
  EXPECT_EQ(r.status, 2);
  write_shard(p("null_entropy.bin"), std::vector<int32_t>{1, 2}, 8,
              {{"entropy_rate", std::nan("")}});
  r = run("data inspect " + p("null_entropy.bin"));
  EXPECT_EQ(r.status, 2) << r.output;  // was exit 3: "internal error: type_error"
  EXPECT_TRUE(has(r.output, "field 'entropy_rate' is null, expected a number")) << r.output;

  // A write past `ulimit -f` is an error naming the file; the old shards stay intact.
  const std::string old_shard = slurp(p("mk/train.bin"));
  const auto limited = trillion::testing::run_shell(
      "bash -c 'ulimit -f 16; " + std::string(TRILLION_BINARY) +
      " data synth --order 1 --vocab 8 --tokens 100000 --overwrite --out " + p("mk") + "' 2>&1");
  EXPECT_EQ(limited.exit_code, 2) << limited.output;
  EXPECT_TRUE(has(limited.output,
                  "File too large (the file size limit, see 'ulimit -f', is too "
                  "small for it)"))
      << limited.output;
  EXPECT_EQ(slurp(p("mk/train.bin")), old_shard);
}

// Issue 39 item 19: `tokenizer train` on an empty file wrote a 0-merge tokenizer, `data prepare`
// tokenized an ELF binary, and a one-document input wrote an empty val.bin with exit 0 (training
// then refused it). Each is now refused where it can still be fixed, naming the file (and offset),
// with nothing written; a text with a few Latin-1 bytes still passes.
TEST_F(CliTest, EmptyBinaryAndOneDocumentInputsAreRefused) {
  { std::ofstream(p("empty.txt")); }
  Result r = run("tokenizer train --vocab 270 --out " + p("tok.json") + " " + p("empty.txt"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, "no text to learn from: '" + p("empty.txt") + "' is empty"))
      << r.output;
  EXPECT_FALSE(fs::exists(p("tok.json")));

  // An ELF-like binary: magic, then zeros and high bytes.
  std::string elf = std::string(1, '\x7f') + "ELF";
  for (int i = 0; i < 2000; ++i) elf += i % 3 ? std::string(1, '\0') : std::string(1, '\xf9');
  std::ofstream(p("prog"), std::ios::binary) << elf;
  r = run("tokenizer train --vocab 270 --out " + p("tok.json") + " " + p("prog"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, "'" + p("prog") + "' is not text: byte 5 is a NUL byte")) << r.output;
  EXPECT_FALSE(fs::exists(p("tok.json")));

  {
    std::ofstream text(p("a.txt"));
    text << "one document, caf\xe9 in Latin-1, with no blank line in it.\nA second line.\n";
  }
  r = run("tokenizer train --vocab 270 --out " + p("tok.json") + " " + p("a.txt"));
  ASSERT_EQ(r.status, 0) << r.output;
  r = run("data prepare --tokenizer " + p("tok.json") + " --out " + p("ds") + " " + p("prog"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, "'" + p("prog") + "' is not text: byte 5")) << r.output;
  EXPECT_FALSE(fs::exists(p("ds")));
  r = run("data prepare --tokenizer " + p("tok.json") + " --out " + p("ds") + " " + p("a.txt"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output,
                  "the input is one document (documents are separated by "
                  "--doc-separator, now \"\\n\\n\"), so the validation split would be "
                  "empty"))
      << r.output;
  EXPECT_FALSE(fs::exists(p("ds")));
  // Split into documents, it prepares.
  r = run("data prepare --tokenizer " + p("tok.json") + " --out " + p("ds") +
          " --doc-separator . " + p("a.txt"));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_GT(open_shard_dataset(p("ds"), Split::kValidation)->num_tokens(), 0);
  r = run("data prepare --tokenizer " + p("tok.json") + " --val-fraction 0 --out " + p("ds0") +
          " " + p("a.txt"));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r.output, "warning: --val-fraction 0 leaves val.bin empty")) << r.output;
}

// Issue 39 item 15: `data synth --tokens 1e11` ended in "out of memory ... use a smaller model"
// (wrong advice). The count is read in exponent form too, and one that cannot fit in memory is
// refused as too large, with the limit, before anything is written.
TEST_F(CliTest, SynthTokenCountsTooLargeAreRefusedWithTheLimit) {
  Result r = run("data synth --tokens 1e15 --out " + p("big"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output,
                  "--tokens 1000000000000000 is too large: data synth holds a split in "
                  "memory (6 bytes a token"))
      << r.output;
  EXPECT_TRUE(has(r.output, "; the limit here is ")) << r.output;
  EXPECT_FALSE(has(r.output, "smaller model")) << r.output;
  EXPECT_FALSE(fs::exists(p("big")));
  r = run("data synth --tokens 2.5 --out " + p("big"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, "--tokens 2.5 is not a whole number of tokens")) << r.output;
  r = run("data synth --tokens 1e4 --val-tokens 2e3 --out " + p("small"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(open_shard_dataset(p("small"), Split::kTrain)->num_tokens(), 10000);
  EXPECT_EQ(open_shard_dataset(p("small"), Split::kValidation)->num_tokens(), 2000);
}
