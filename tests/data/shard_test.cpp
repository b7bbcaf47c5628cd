// Shards: write/read round trip (uint16 and uint32), metadata, and a clear error for every bad
// input (missing, truncated, corrupt, token id >= vocab, vocab mismatch), with existing files
// left intact by a failed write.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/error.h"
#include "data/file_io.h"
#include "data/loader.h"
#include "data/shard.h"

using namespace trillion;
using namespace trillion::data;
namespace fs = std::filesystem;

namespace {
class ShardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("trillion_shard_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // The error message of opening `file`, or "" if it opened.
  static std::string open_error(const std::string& file) {
    try {
      ShardDataset dataset({file});
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

std::string slurp(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void spit(const std::string& file, const std::string& bytes) {
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
}
bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}
}  // namespace

TEST_F(ShardTest, RoundTripsSmallAndLargeVocab) {
  for (int64_t vocab : {300, 70000}) {
    std::vector<int32_t> tokens(1234);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7919) % vocab);
    write_shard(path("a.bin"), tokens, vocab, {{"split", "train"}, {"entropy_rate", 1.25}});
    ShardInfo info = read_shard_info(path("a.bin"));
    EXPECT_EQ(info.token_bytes, vocab <= 65536 ? 2u : 4u);
    EXPECT_EQ(info.vocab_size, vocab);
    EXPECT_EQ(info.num_tokens, 1234);
    EXPECT_EQ(info.metadata["split"], "train");
    auto dataset = std::make_shared<ShardDataset>(std::vector<std::string>{path("a.bin")});
    EXPECT_EQ(dataset->entropy_rate().value(), 1.25);
    DataLoader loader(dataset, 10, 0, SampleOrder::kSequential);
    EXPECT_EQ(loader.num_samples(), 123);
    std::vector<int32_t> x(10), y(10);
    loader.sample(50, x.data(), y.data());
    for (int t = 0; t < 10; ++t) {
      EXPECT_EQ(x[t], tokens[500 + t]);
      EXPECT_EQ(y[t], tokens[501 + t]);
    }
  }
}

TEST_F(ShardTest, MultipleShardsAreSeparatePieces) {
  std::vector<int32_t> a(21, 1), b(31, 2);
  write_shard(path("a.bin"), a, 8, {});
  write_shard(path("b.bin"), b, 8, {});
  ShardDataset dataset({path("a.bin"), path("b.bin")});
  EXPECT_EQ(dataset.num_tokens(), 52);
  EXPECT_EQ(dataset.num_samples(10), 2 + 3);  // no window crosses a shard boundary
  std::vector<int32_t> window(11);
  dataset.read_window(2, 10, window.data());
  EXPECT_EQ(window[0], 2);
}

TEST_F(ShardTest, MissingShardIsAClearError) {
  std::string m = open_error(path("nope.bin"));
  EXPECT_TRUE(contains(m, "nope.bin")) << m;
  EXPECT_TRUE(contains(m, "data prepare")) << m;
}

TEST_F(ShardTest, TruncatedShardIsAClearError) {
  write_shard(path("a.bin"), std::vector<int32_t>(1000, 3), 16, {});
  std::string bytes = slurp(path("a.bin"));
  spit(path("t.bin"), bytes.substr(0, bytes.size() - 10));
  std::string m = open_error(path("t.bin"));
  EXPECT_TRUE(contains(m, "t.bin") && contains(m, "truncated") && contains(m, "1000 tokens")) << m;
  spit(path("h.bin"), bytes.substr(0, 20));
  m = open_error(path("h.bin"));
  EXPECT_TRUE(contains(m, "truncated")) << m;
  spit(path("e.bin"), "");
  EXPECT_TRUE(contains(open_error(path("e.bin")), "truncated"));
}

TEST_F(ShardTest, CorruptShardIsAClearError) {
  write_shard(path("a.bin"), std::vector<int32_t>(1000, 3), 16, {{"split", "val"}});
  std::string good = slurp(path("a.bin"));
  ShardInfo info = read_shard_info(path("a.bin"));
  struct Case {
    size_t offset;
    const char* expect;
  } cases[] = {{0, "bad magic"},
               {20, "header checksum"},
               {70, "metadata checksum"},
               {static_cast<size_t>(info.data_offset) + 100, "token checksum"}};
  for (const Case& c : cases) {
    std::string bad = good;
    bad[c.offset] ^= 0x5a;
    spit(path("c.bin"), bad);
    std::string m = open_error(path("c.bin"));
    EXPECT_TRUE(contains(m, c.expect) && contains(m, "c.bin")) << m;
  }
  spit(path("c.bin"), good + "junk");
  EXPECT_TRUE(contains(open_error(path("c.bin")), "unexpected bytes"));
}

TEST_F(ShardTest, TokenIdAtOrAboveVocabIsAClearError) {
  // Writing refuses it and leaves the existing file intact.
  write_shard(path("a.bin"), std::vector<int32_t>(100, 3), 16, {});
  std::string before = slurp(path("a.bin"));
  std::vector<int32_t> bad(100, 3);
  bad[42] = 16;
  try {
    write_shard(path("a.bin"), bad, 16, {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "token 42 has id 16")) << e.what();
  }
  EXPECT_EQ(slurp(path("a.bin")), before);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
  // A shard whose checksums are consistent but whose header vocab is too small (a writer bug).
  std::string bytes = before;
  ShardInfo info = read_shard_info(path("a.bin"));
  uint16_t big = 15;
  int64_t small_vocab = 10;
  std::memcpy(&bytes[info.data_offset + 2 * 7], &big, 2);
  std::memcpy(&bytes[16], &small_vocab, 8);
  uint64_t token_sum = XXH64(&bytes[info.data_offset], 200, 0);
  std::memcpy(&bytes[40], &token_sum, 8);
  uint64_t header_sum = XXH64(bytes.data(), 56, 0);
  std::memcpy(&bytes[56], &header_sum, 8);
  spit(path("v.bin"), bytes);
  std::string m = open_error(path("v.bin"));
  EXPECT_TRUE(contains(m, "token 7 has id 15 >= vocab size 10")) << m;
}

TEST_F(ShardTest, VocabMismatchIsAClearError) {
  write_shard(path("a.bin"), std::vector<int32_t>(100, 3), 16, {});
  write_shard(path("b.bin"), std::vector<int32_t>(100, 3), 32, {});
  try {
    ShardDataset dataset({path("a.bin"), path("b.bin")});
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "vocabulary mismatch")) << e.what();
  }
  ShardDataset b({path("b.bin")});
  try {
    check_vocab_fits(b, 16);
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "b.bin") && contains(e.what(), "vocab size 32")) << e.what();
  }
}

TEST_F(ShardTest, AtomicWriteFailsCleanlyIntoMissingDirectory) {
  try {
    write_file_atomic(path("missing/x.bin"), {"abc"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "does not exist")) << e.what();
  }
}

TEST_F(ShardTest, ReadFileIsGzipTransparent) {
  spit(path("plain.txt"), "hello\n");
  EXPECT_EQ(read_file(path("plain.txt")), "hello\n");
  // "hello\n" gzipped (gzip -n).
  const unsigned char gz[] = {0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                              0x03, 0xcb, 0x48, 0xcd, 0xc9, 0xc9, 0xe7, 0x02, 0x00,
                              0x20, 0x30, 0x3a, 0x36, 0x06, 0x00, 0x00, 0x00};
  spit(path("g.txt.gz"), std::string(reinterpret_cast<const char*>(gz), sizeof(gz)));
  EXPECT_EQ(read_file(path("g.txt.gz")), "hello\n");
}
