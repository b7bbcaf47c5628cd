// `trillion data prepare` over real corpus shapes (through the built binary): text, JSON lines,
// .gz and .zst files and directories of them give the same tokens; the output bytes do not
// depend on --threads; bad documents are counted and reported by file:line and bounded by
// --max-bad; --shard-tokens cuts shards at document ends, listed in manifest.json; damaged
// compressed inputs fail clearly with nothing written; GPT-2's tokenizer.json ends every
// document with <|endoftext|>.
#include <gtest/gtest.h>
#include <zlib.h>
#include <zstd.h>

#include <filesystem>
#include <fstream>

#include "../train/cli_util.h"
#include "data/file_io.h"
#include "data/shard.h"
#include "data/text_tokenizer.h"
#include "data/tokenizer.h"
#include "gpt2_fixture.h"

using namespace trillion;
using namespace trillion::data;
using trillion::testing::has;
using trillion::testing::slurp;
namespace fs = std::filesystem;

namespace {
struct Result {
  int status;
  std::string output;
};
Result run(const std::string& args) {
  const auto r = trillion::testing::run_trillion(args);
  return {r.exit_code, r.output};
}

std::vector<std::string> documents(int count) {
  std::vector<std::string> docs;
  for (int k = 0; k < count; ++k) {
    docs.push_back("Document " + std::to_string(k) + ": the quick brown fox jumps over " +
                   std::to_string(k * 7) + " lazy dogs.\nA second line, caf\xc3\xa9 \xe6\x9d\xb1.");
  }
  return docs;
}

std::string jsonl(const std::vector<std::string>& docs, size_t begin, size_t end) {
  std::string s;
  for (size_t k = begin; k < end; ++k)
    s += nlohmann::json({{"id", k}, {"text", docs[k]}}).dump() + "\n";
  return s;
}

std::string gzip(const std::string& text) {
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, text.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string zstd(const std::string& text) {
  std::string out(ZSTD_compressBound(text.size()), '\0');
  out.resize(ZSTD_compress(out.data(), out.size(), text.data(), text.size(), 3));
  return out;
}

// Every token of a split, its shards read whole in order.
std::vector<int32_t> all_tokens(const std::string& dir, Split split) {
  ShardDataset ds(split_shard_paths(dir, split));
  std::vector<int32_t> ids(ds.num_tokens());
  int64_t at = 0;
  for (size_t s = 0; s < ds.shards().size(); ++s) {
    const int64_t count = ds.shards()[s].num_tokens;
    if (count > 0) ds.read_tokens(static_cast<int64_t>(s), 0, count, ids.data() + at);
    at += count;
  }
  return ids;
}

class PrepareTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("trillion-h37-ingest-prepare-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    docs_ = documents(60);
    std::string joined;
    for (const std::string& d : docs_) joined += d + "\n\n";
    write("corpus.txt", joined);
    Tokenizer::train(std::vector<std::string>{joined}, 300).save(p("tok.json"));
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string p(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& name, const std::string& bytes) {
    fs::create_directories((dir_ / name).parent_path());
    std::ofstream(p(name), std::ios::binary) << bytes;
  }
  fs::path dir_;
  std::vector<std::string> docs_;
};
}  // namespace

TEST_F(PrepareTest, FormatsCompressionAndDirectoriesGiveTheSameTokens) {
  const std::string common = " --tokenizer " + p("tok.json") + " --val-fraction 0.2 --progress off";
  ASSERT_EQ(run("data prepare" + common + " --out " + p("text") + " " + p("corpus.txt")).status, 0);
  write("all.jsonl", jsonl(docs_, 0, 60));
  Result r =
      run("data prepare" + common + " --format jsonl --out " + p("jl") + " " + p("all.jsonl"));
  ASSERT_EQ(r.status, 0) << r.output;
  write("parts/a.jsonl", jsonl(docs_, 0, 20));
  write("parts/b.jsonl.gz", gzip(jsonl(docs_, 20, 40)));
  write("parts/sub/c.jsonl.zst", zstd(jsonl(docs_, 40, 60)));
  for (const char* threads : {"1", "3"}) {
    r = run("data prepare" + common + " --format jsonl --threads " + threads + " --out " +
            p(std::string("dir") + threads) + " " + p("parts"));
    ASSERT_EQ(r.status, 0) << r.output;
  }
  for (Split split : {Split::kTrain, Split::kValidation}) {
    const auto want = all_tokens(p("text"), split);
    EXPECT_GT(want.size(), 100u);
    EXPECT_EQ(all_tokens(p("jl"), split), want);
    EXPECT_EQ(all_tokens(p("dir1"), split), want);
  }
  // Every file of the output is the same bytes on 1 and 3 threads.
  for (const char* name : {"train.bin", "val.bin", "manifest.json"}) {
    EXPECT_EQ(slurp(p(std::string("dir1/") + name)), slurp(p(std::string("dir3/") + name))) << name;
  }
  const auto manifest = nlohmann::json::parse(slurp(p("dir1/manifest.json")));
  EXPECT_EQ(manifest["documents"], 60);
  ASSERT_EQ(manifest["sources"].size(), 3u);
  EXPECT_EQ(manifest["sources"][0]["compression"], "text");
  EXPECT_EQ(manifest["sources"][1]["compression"], "gzip");
  EXPECT_EQ(manifest["sources"][2]["compression"], "zstd");
  EXPECT_EQ(manifest["sources"][2]["documents"], 20);
  EXPECT_EQ(manifest["tokenizer"]["hash"], tokenizer_file_hash(p("tok.json")));
  const Tokenizer tok = Tokenizer::load(p("tok.json"));
  EXPECT_EQ(read_shard_info(p("dir1/train.bin")).metadata["document_end_id"], tok.eos_id());
}

TEST_F(PrepareTest, BadDocumentsAreCountedAndReportedByLine) {
  write("bad.jsonl", jsonl(docs_, 0, 1) + "{not json\n{\"id\": 1}\n{\"text\": 5}\n\"a string\"\n" +
                         "{\"text\": \"caf\xe9\"}\n" + jsonl(docs_, 1, 2) + "\n" +
                         jsonl(docs_, 2, 3));
  const std::string args = "data prepare --format jsonl --tokenizer " + p("tok.json") +
                           " --progress off " + p("bad.jsonl");
  Result r = run(args + " --out " + p("out"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r.output, p("bad.jsonl") + ":2: invalid JSON")) << r.output;
  EXPECT_TRUE(has(r.output, ":3: no \"text\" field")) << r.output;
  EXPECT_TRUE(has(r.output, ":4: field \"text\" is the integer 5, not a string")) << r.output;
  EXPECT_TRUE(has(r.output, ":5: the line is a string, not a JSON object")) << r.output;
  EXPECT_TRUE(has(r.output, ":6: invalid UTF-8 at byte 13 of the line")) << r.output;
  EXPECT_TRUE(has(r.output, "skipped 5 bad documents")) << r.output;
  const auto manifest = nlohmann::json::parse(slurp(p("out/manifest.json")));
  EXPECT_EQ(manifest["documents"], 3);
  EXPECT_EQ(manifest["bad_documents"], 5);
  EXPECT_EQ(manifest["bad_examples"][0], p("bad.jsonl") + ":2: invalid JSON");
  // Over --max-bad, the run stops with the first bad document named and nothing written.
  r = run(args + " --max-bad 2 --out " + p("strict"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, "3 bad documents, more than --max-bad 2; the first: " + p("bad.jsonl") +
                                ":2: invalid JSON"))
      << r.output;
  EXPECT_FALSE(fs::exists(p("strict")));
}

TEST_F(PrepareTest, ShardsAreCutAtDocumentEndsAndListedInTheManifest) {
  const std::string common =
      "data prepare --progress off --tokenizer " + p("tok.json") + " --out " + p("out") + " ";
  ASSERT_EQ(run(common + p("corpus.txt")).status, 0);
  const auto whole = all_tokens(p("out"), Split::kTrain);
  Result r = run(common + "--overwrite --shard-tokens 300 " + p("corpus.txt"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_FALSE(fs::exists(p("out/train.bin")));  // the earlier single shard is gone
  const auto paths = split_shard_paths(p("out"), Split::kTrain);
  ASSERT_GT(paths.size(), 2u);
  EXPECT_EQ(paths[0], p("out/train-00000.bin"));
  const int32_t end_id = Tokenizer::load(p("tok.json")).eos_id();
  for (const std::string& path : paths) {
    const ShardInfo info = read_shard_info(path);
    EXPECT_EQ(info.metadata["document_end_id"], end_id);
    ShardDataset one({path});
    int32_t last = -1;
    one.read_tokens(0, info.num_tokens - 1, 1, &last);
    EXPECT_EQ(last, end_id) << path;  // shards end between documents
    if (path != paths.back()) {
      EXPECT_GE(info.num_tokens, 300) << path;
    }
  }
  EXPECT_EQ(all_tokens(p("out"), Split::kTrain), whole);
  EXPECT_EQ(open_shard_dataset(p("out"), Split::kTrain)->num_pieces(),
            static_cast<int64_t>(paths.size()));
  // Without --overwrite an existing output is refused before anything is read.
  r = run(common + p("corpus.txt"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, "already exists; pass --overwrite")) << r.output;
  // data synth over it needs --overwrite too, and then its train.bin is what training reads.
  r = run("data synth --vocab 8 --tokens 1000 --out " + p("out"));
  EXPECT_EQ(r.status, 2) << r.output;
  ASSERT_EQ(run("data synth --vocab 8 --tokens 1000 --overwrite --out " + p("out")).status, 0);
  EXPECT_EQ(open_shard_dataset(p("out"), Split::kTrain)->num_tokens(), 1000);
}

TEST_F(PrepareTest, DamagedCompressedInputsFailClearly) {
  const std::string text = jsonl(docs_, 0, 60);
  const std::string gz = gzip(text), zs = zstd(text);
  write("cut.jsonl.gz", gz.substr(0, gz.size() / 2));
  write("cut.jsonl.zst", zs.substr(0, zs.size() / 2));
  write("tail.jsonl.gz", gz + "garbage");
  // Concatenated gzip members are one stream, as gzip(1) reads them.
  write("two.jsonl.gz", gzip(jsonl(docs_, 0, 30)) + gzip(jsonl(docs_, 30, 60)));
  Result ok = run("data prepare --format jsonl --progress off --tokenizer " + p("tok.json") +
                  " --out " + p("two") + " " + p("two.jsonl.gz"));
  ASSERT_EQ(ok.status, 0) << ok.output;
  EXPECT_EQ(nlohmann::json::parse(slurp(p("two/manifest.json")))["documents"], 60);
  for (const char* name : {"cut.jsonl.gz", "cut.jsonl.zst", "tail.jsonl.gz"}) {
    Result r = run("data prepare --format jsonl --progress off --tokenizer " + p("tok.json") +
                   " --out " + p("out") + " " + p(name));
    EXPECT_EQ(r.status, 2) << name << r.output;
    EXPECT_TRUE(has(r.output, "'" + p(name) + "' is")) << r.output;
    EXPECT_FALSE(fs::exists(p("out"))) << name;
  }
}

TEST_F(PrepareTest, Gpt2TokenizerJsonEndsEveryDocumentWithEndoftext) {
  const std::string gpt2 = trillion::test::write_gpt2_tokenizer_json();
  write("docs.jsonl", jsonl(docs_, 0, 10));
  Result r = run("data prepare --format jsonl --val-fraction 0.2 --progress off --tokenizer " +
                 gpt2 + " --out " + p("out") + " " + p("docs.jsonl"));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto tokenizer = load_text_tokenizer(gpt2);
  std::string train_text;
  std::vector<int32_t> ids = all_tokens(p("out"), Split::kTrain);
  std::vector<int32_t> val = all_tokens(p("out"), Split::kValidation);
  EXPECT_EQ(read_shard_info(p("out/train.bin")).vocab_size, 50257);
  EXPECT_EQ(read_shard_info(p("out/train.bin")).token_bytes, 2u);
  ids.insert(ids.end(), val.begin(), val.end());
  int ends = 0;
  for (int32_t id : ids) ends += id == 50256;
  EXPECT_EQ(ends, 10);
  const std::string decoded = tokenizer->decode(ids);
  for (size_t k = 0; k < 10; ++k) {
    EXPECT_TRUE(has(decoded, docs_[k] + "<|endoftext|>")) << k;
  }
}

// The progress line (--progress on; auto shows it on a terminal): bytes read of the whole input,
// percent, MB/s, ETA, documents and bad documents, rewritten in place with \r, and its last state
// says all of the input was read.
TEST_F(PrepareTest, TheProgressLineCountsTheInput) {
  const std::string text = jsonl(docs_, 0, 40) + "{not json\n";
  write("docs.jsonl", text);
  Result r = run("data prepare --format jsonl --progress on --tokenizer " + p("tok.json") +
                 " --out " + p("out") + " " + p("docs.jsonl"));
  ASSERT_EQ(r.status, 0) << r.output;
  const size_t last = r.output.rfind("\rprepare: ");
  ASSERT_NE(last, std::string::npos) << r.output;
  const std::string line = r.output.substr(last + 1, r.output.find('\n', last) - last - 1);
  const std::string mb = fmt::format("{:.1f}", static_cast<double>(text.size()) / 1e6);
  EXPECT_TRUE(line.starts_with("prepare: " + mb + " / " + mb + " MB (100%)")) << line;
  EXPECT_TRUE(has(line, " MB/s  ETA ")) << line;
  EXPECT_TRUE(has(line, "  40 docs  1 bad")) << line;
  r = run("data prepare --format jsonl --progress off --overwrite --tokenizer " + p("tok.json") +
          " --out " + p("out") + " " + p("docs.jsonl"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_FALSE(has(r.output, "\rprepare: ")) << r.output;
}
