// Mixtures in whole runs (data.sources, docs/data.md): two Markov shard directories at weights
// 0.7 / 0.3. After 25 steps of 4 sequences each source's tokens in metrics.jsonl are within 1% of
// its weight's share, and summary.json reports its epochs; the run at dp 2 trains the same stream
// (losses and weights within 1e-5), and a run killed at step 17 and resumed from its step-10
// checkpoint ends bitwise equal to the uninterrupted run; stopped after step 10 in one process and
// resumed at dp 2 (resharding), it reads the same stream and trains the same. With
// data.on_exhausted = "stop" a run whose small source would start its second epoch stops before
// that step. Also: the document-end token of prepared shards (their tokenizer's <|eos|>) and the
// [data] keys' errors.
#include <gtest/gtest.h>

#include <fstream>

#include "cli_util.h"
#include "core/error.h"
#include "data/shard.h"
#include "train/run_config.h"

namespace trillion {
namespace {

using testing::fresh_dir;
using testing::one_thread_per_rank;
using testing::read_json;
using testing::read_metrics;
using testing::run_shell;
using testing::run_trillion;

// Two shard directories and a mixture config in `dir`; returns the config's path.
std::string mixture_config(const std::string& dir, int64_t small_tokens) {
  std::filesystem::create_directories(dir);
  for (const auto& [name, tokens, seed] :
       {std::tuple{"a", int64_t{40000}, 1}, std::tuple{"b", small_tokens, 2}}) {
    const auto r = run_trillion("data synth --vocab 64 --tokens " + std::to_string(tokens) +
                                " --val-tokens 2000 --seed " + std::to_string(seed) + " --out " +
                                dir + "/" + name);
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
  const std::string path = dir + "/mix.toml";
  std::ofstream(path) << "[model]\nvocab_size = 64\nd_model = 32\nn_layers = 2\nn_heads = 4\n"
                         "n_kv_heads = 2\nffn_hidden = 64\nseq_len = 32\n\n"
                         "[train]\nmicro_batch = 4\nsteps = 25\nseed = 1\neval_batches = 1\n\n"
                         "[optim]\nlr = 3e-3\n\n[data]\nsource = \"shards\"\n\n"
                         "[[data.sources]]\npath = \""
                      << dir << "/a\"\nweight = 0.7\n\n[[data.sources]]\npath = \"" << dir
                      << "/b\"\nweight = 0.3\n";
  return path;
}

TEST(DataMixture, TokensFollowTheWeightsAndTheStreamSurvivesDpAndResume) {
  const std::string env = one_thread_per_rank();
  const std::string dir = fresh_dir("h37_mixture");
  const std::string config = mixture_config(dir, 20000);
  const std::string train = "train " + config + " --quiet";
  auto r = run_trillion(env + train + " --run-dir " + dir + "/one");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto lines = read_metrics(dir + "/one");
  ASSERT_EQ(lines.size(), 25u);
  for (const auto& line : {lines[4], lines.back()}) {  // after 5 and 25 steps
    const auto& sources = line["data_sources"];
    const double a = sources[0]["tokens"].get<double>(), b = sources[1]["tokens"].get<double>();
    EXPECT_EQ(a + b, line["step"].get<double>() * 4 * 32);
    EXPECT_NEAR(a / (a + b), 0.7, 0.007) << line.dump();
    EXPECT_NEAR(b / (a + b), 0.3, 0.003) << line.dump();
  }
  const auto summary = read_json(dir + "/one/summary.json");
  // 25 steps x 4 samples = 70 + 30; source b holds (20000 - 1) / 32 = 624 samples.
  EXPECT_DOUBLE_EQ(summary["data_sources"][1]["epochs"].get<double>(), 30.0 / 624.0);

  r = run_trillion(env + "launch -n 2 -- " + train + " --set parallel.dp=2 --run-dir " + dir +
                   "/dp2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto cmp = run_trillion("compare " + dir + "/one " + dir + "/dp2 --tol 1e-5");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;

  const std::string resumed = train + " --set checkpoint.interval=10 --run-dir " + dir + "/resumed";
  r = run_shell(env + "TRILLION_KILL_RANK_AT_STEP=0:17 " + std::string(TRILLION_BINARY) + " " +
                resumed + " 2>&1");
  ASSERT_NE(r.exit_code, 0) << "the run was to be killed at step 17";
  r = run_trillion(env + resumed + " --resume");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  cmp = run_trillion("compare " + dir + "/one " + dir + "/resumed --tol 1e-5");
  EXPECT_NE(cmp.output.find("bitwise equal"), std::string::npos) << cmp.output;

  // Resharding: stopped after step 10 in one process and resumed at dp 2, the run reads the same
  // stream (each source's tokens at the end as the uninterrupted run's) and trains the same.
  const std::string moved = train + " --set checkpoint.interval=10 --run-dir " + dir + "/moved";
  r = run_trillion(env + moved + " --stop-after 10");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_trillion(env + "launch -n 2 -- " + moved + " --set parallel.dp=2 --resume");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  cmp = run_trillion("compare " + dir + "/one " + dir + "/moved --tol 1e-5");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
  EXPECT_EQ(read_metrics(dir + "/moved").back()["data_sources"], lines.back()["data_sources"]);
}

TEST(DataMixture, StopsBeforeASourceStartsItsSecondEpoch) {
  const std::string dir = fresh_dir("h37_mixture_stop");
  const std::string config = mixture_config(dir, 1000);  // source b: 31 samples
  const auto r = run_trillion(one_thread_per_rank() + "train " + config +
                              " --quiet --set data.on_exhausted=stop --set train.steps=100"
                              " --run-dir " +
                              dir + "/run");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto summary = read_json(dir + "/run/summary.json");
  EXPECT_FALSE(summary["completed"].get<bool>());
  EXPECT_EQ(summary["data_sources"][1]["epochs"].get<double>(), 1.0);  // all of it, once
  EXPECT_LT(summary["steps"].get<int>(), 100);
}

// Shards of `data prepare` without "document_end_id" end documents with their tokenizer's
// <|eos|>: read from the tokenizer file, and V - 2 (trillion BPE's) once that file is gone.
TEST(DataMixture, DocumentEndComesFromTheShardsTokenizer) {
  const std::string dir = fresh_dir("h37_document_end");
  std::filesystem::create_directories(dir);
  {
    std::ofstream text(dir + "/corpus.txt");
    for (int d = 0; d < 40; ++d) {
      for (int w = 0; w < 30 + d % 7; ++w) text << "word" << (w * 7 + d) % 23 << ' ';
      text << "\n\n";
    }
  }
  auto r =
      run_trillion("tokenizer train --vocab 300 --out " + dir + "/tok.json " + dir + "/corpus.txt");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_trillion("data prepare --tokenizer " + dir + "/tok.json --out " + dir + "/d " + dir +
                   "/corpus.txt");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string train = one_thread_per_rank() + "train " + testing::config_path("tiny.toml") +
                            " --quiet --set train.steps=1 --set model.vocab_size=300"
                            " --set data.source=shards --set data.path=" +
                            dir + "/d --set data.document_mask=true --run-dir ";
  // The tokenizer learned fewer merges than asked on this small text: V is the shard's.
  const int64_t vocab = data::read_shard_info(dir + "/d/train.bin").vocab_size;
  for (const char* run : {"with_file", "without_file"}) {
    if (std::string(run) == "without_file") std::filesystem::remove(dir + "/tok.json");
    r = run_trillion(train + dir + "/" + run);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto summary = read_json(dir + "/" + run + "/summary.json");
    EXPECT_EQ(summary["documents"]["document_end_id"].get<int64_t>(), vocab - 2) << run;
  }
}

// The error parse_run_config gives for `data` as the [data] section of "c.toml" ("" if none).
std::string data_error(const std::string& data) {
  try {
    parse_run_config(
        "[model]\nvocab_size = 64\nd_model = 32\nn_layers = 2\nn_heads = 4\n"
        "ffn_hidden = 64\nseq_len = 32\n[data]\n" +
            data,
        "c.toml", {});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DataMixture, BadKeysAreRefusedByName) {
  const std::string source = "source = \"shards\"\n";
  EXPECT_EQ(data_error(source + "[[data.sources]]\npath = \"a\"\nweight = 0\n"),
            "c.toml: data.sources[0].weight = 0 must be a number > 0");
  EXPECT_NE(
      data_error(source + "[[data.sources]]\nweight = 1\n").find("data.sources[0] needs a path"),
      std::string::npos);
  EXPECT_NE(data_error(source + "[[data.sources]]\npath = \"a\"\nsize = 3\n")
                .find("data.sources[0].size: only path (a string) and weight"),
            std::string::npos);
  EXPECT_NE(data_error(source + "path = \"b\"\n[[data.sources]]\npath = \"a\"\n")
                .find("leave data.path out"),
            std::string::npos);
  EXPECT_NE(data_error("on_exhausted = \"loop\"\n").find("data.on_exhausted = 'loop'"),
            std::string::npos);
  EXPECT_NE(data_error("restart_positions = true\n").find("needs data.document_mask = true"),
            std::string::npos);
  EXPECT_NE(data_error("document_end_id = -2\n").find("data.document_end_id = -2"),
            std::string::npos);
  EXPECT_EQ(data_error(source + "[[data.sources]]\npath = \"a\"\n[[data.sources]]\npath = "
                                "\"b\"\nweight = 2\n"),
            "");
}

}  // namespace
}  // namespace trillion
