// The KV-cached decoder gives the full-window logits at every position, and `trillion generate`
// the same tokens with and without the cache; generate finds the run's tokenizer from another
// directory (and export likewise); tokenizer.json's byte alphabet and tables.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "../train/cli_util.h"
#include "data/tokenizer.h"
#include "interop/hf_tokenizer.h"
#include "model/cached_decoder.h"
#include "tiny_run.h"

namespace trillion {
namespace {

using testing::fresh_dir;
using testing::make_tiny_run;
using testing::run_shell;
using testing::run_trillion;

// Dense multi-head latent attention on tiny.toml's width (d_model 32, 4 heads): qk 8 + 4 rope,
// v 6, kv latent 16, and a query latent of q_lora (0: none).
std::vector<std::string> mla_sets(int q_lora) {
  return {"model.attention=\"mla\"",
          "model.n_kv_heads=4",
          "model.kv_lora_rank=16",
          "model.qk_nope_head_dim=8",
          "model.qk_rope_head_dim=4",
          "model.v_head_dim=6",
          "model.q_lora_rank=" + std::to_string(q_lora)};
}

// The cached decoder's logits at every position equal the full forward's at that position.
template <DType kDtype>
void cached_equals_full(double tolerance, std::vector<std::string> sets = {}) {
  sets.push_back(std::string("model.dtype=\"") + (kDtype == DType::f64 ? "f64" : "f32") + "\"");
  sets.push_back("model.init_std=0.2");
  RunConfig cfg = load_run_config(testing::config_path("tiny.toml"), sets);
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const int64_t T = cfg.model.seq_len, V = cfg.model.vocab_size;
  Transformer model(cfg.model, {1, T}, *be, tracker);
  model.init_parameters(11);
  std::vector<int32_t> ids(T), targets(T, 0);
  for (int64_t t = 0; t < T; ++t) ids[t] = static_cast<int32_t>((t * 37 + 5) % V);
  model.forward(ids.data(), targets.data());
  Buffer full(tracker, MemoryCategory::workspace, cfg.model.dtype, T * V);
  be->gemm(full.view(0, {T, V}), false, true, model.final_hidden(), model.head_weight(), 1.0, 0.0);
  std::vector<double> want(T * V), got(V);
  be->copy(Tensor(want.data(), DType::f64, {T * V}), full.flat());
  CachedDecoder dec(model.config(), model.table(), model.parameters(), *be, tracker);
  double max_diff = 0;
  for (int64_t t = 0; t < T; ++t) {
    be->copy(Tensor(got.data(), DType::f64, {V}), dec.step(ids[t]).view({V}));
    for (int64_t v = 0; v < V; ++v)
      max_diff = std::max(max_diff, std::abs(got[v] - want[t * V + v]));
  }
  EXPECT_LT(max_diff, tolerance);
  EXPECT_EQ(dec.position(), T);
}

TEST(CachedDecoder, LogitsEqualTheFullForwardAtEveryPositionF64) {
  cached_equals_full<DType::f64>(1e-12);
}
TEST(CachedDecoder, LogitsEqualTheFullForwardAtEveryPositionF32) {
  cached_equals_full<DType::f32>(2e-5);
}

// MLA's latent cache (keys and values never formed: the up-projections absorbed) gives the full
// forward's logits, with and without query compression, and caches DC + DR elements per token
// and layer.
TEST(CachedDecoder, MlaLatentCacheEqualsTheFullForward) {
  for (int q_lora : {0, 12}) {
    cached_equals_full<DType::f64>(1e-12, mla_sets(q_lora));
    cached_equals_full<DType::f32>(2e-5, mla_sets(q_lora));
  }
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const RunConfig cfg = load_run_config(testing::config_path("tiny.toml"), mla_sets(12));
  Transformer model(cfg.model, {1, cfg.model.seq_len}, *be, tracker);
  const size_t before = tracker.current(MemoryCategory::activations);
  CachedDecoder dec(model.config(), model.table(), model.parameters(), *be, tracker);
  const int64_t per_token = cfg.model.n_layers * (16 + 4) * 4;
  EXPECT_EQ(dec.cache_bytes_per_token(), per_token);
  EXPECT_EQ(tracker.current(MemoryCategory::activations) - before,
            static_cast<size_t>(per_token * cfg.model.seq_len));
  // GQA's cache on the same model: 2 KV HD per layer.
  const RunConfig gqa = load_run_config(testing::config_path("tiny.toml"), {});
  Transformer plain(gqa.model, {1, gqa.model.seq_len}, *be, tracker);
  CachedDecoder plain_dec(plain.config(), plain.table(), plain.parameters(), *be, tracker);
  EXPECT_EQ(plain_dec.cache_bytes_per_token(),
            gqa.model.n_layers * 2 * gqa.model.n_kv_heads * gqa.model.head_dim * 4);
}

TEST(CachedDecoder, MlaGenerateGivesTheFullWindowTokens) {
  const std::string root = fresh_dir("kv_generate_mla");
  std::vector<std::string> sets = mla_sets(12);
  sets.push_back("model.init_std=0.3");
  make_tiny_run(root + "/run", sets);
  const std::string args =
      "generate --checkpoint " + root + "/run --prompt-ids '1 2 3' --max-tokens 40 --temperature 0";
  const auto cached = run_trillion(args, false);
  const auto full = run_trillion(args + " --no-kv-cache", false);
  ASSERT_EQ(cached.exit_code, 0) << cached.output;
  EXPECT_EQ(cached.output, full.output);
  EXPECT_GT(cached.output.size(), 40u * 2);
  // --stats prints the cache per token: (DC + DR) x layers x 4 bytes, beside MHA's 2 C x layers.
  const int64_t layers = load_run_config(testing::config_path("tiny.toml"), sets).model.n_layers;
  const auto stats = run_trillion(args + " --stats");
  EXPECT_NE(stats.output.find("kv cache: " + std::to_string(layers * 20 * 4) +
                              " bytes per token (MLA: the kv latent and the rope key); at d_model "
                              "32: MHA " +
                              std::to_string(layers * 2 * 32 * 4)),
            std::string::npos)
      << stats.output;
}

TEST(CachedDecoder, GenerateGivesTheFullWindowTokens) {
  const std::string root = fresh_dir("kv_generate");
  make_tiny_run(root + "/run", {"model.init_std=0.3"});
  // 3 prompt + 45 tokens run past the 32-token window: the cache hands over to the window path.
  for (const std::string sampling : {"--temperature 0", "--temperature 0.9 --top-k 20 --seed 4",
                                     "--temperature 1 --top-p 0.9 --seed 9 --samples 2"}) {
    const std::string args =
        "generate --checkpoint " + root + "/run --prompt-ids '1 2 3' --max-tokens 45 " + sampling;
    const auto cached = run_trillion(args, false);
    const auto full = run_trillion(args + " --no-kv-cache", false);
    ASSERT_EQ(cached.exit_code, 0) << cached.output;
    EXPECT_EQ(cached.output, full.output) << sampling;
    EXPECT_GT(cached.output.size(), 45u * 2);
  }
  const auto r = run_trillion("generate --checkpoint " + root +
                              "/run --prompt-ids '1' --max-tokens 4 --stats");
  EXPECT_NE(r.output.find("tokens/s (kv cache)"), std::string::npos) << r.output;
}

// Issue 39 item 15: run from another directory than training, generate said "no tokenizer for
// --prompt" without the path it tried (data.path and the shards' tokenizer are relative to where
// training and `data prepare` ran); --top-k -1 printed a 309-digit range. Now both paths are also
// tried against the run directory and the directories above it, and named when none exists.
TEST(Generate, FindsTheRunsTokenizerFromAnotherDirectoryAndNamesThePathsTried) {
  const std::string root = fresh_dir("gen_tokenizer");
  const std::string work = root + "/work", tokenizer = work + "/runs/data/tok.json";
  make_tiny_run(work + "/runs/r",
                {"model.vocab_size=272", "data.source=\"shards\"", "data.path=\"runs/data\""});
  std::filesystem::create_directories(work + "/runs/data");
  std::ofstream(work + "/text.txt") << "the cat sat on the mat\n\nthe dog sat on the log\n\n"
                                       "the cat ate the rat\n";
  const std::string bin = TRILLION_BINARY;
  const auto prep =
      run_shell("cd " + work + " && " + bin +
                " tokenizer train --vocab 270 --out runs/data/tok.json text.txt && " + bin +
                " data prepare --tokenizer runs/data/tok.json --out runs/data "
                "text.txt 2>&1");
  ASSERT_EQ(prep.exit_code, 0) << prep.output;
  const std::string args = " --prompt 'the' --max-tokens 4 --temperature 0";
  auto generate = [&](const std::string& extra = "") {
    return run_shell("cd " + root + " && " + bin + " generate --checkpoint work/runs/r" + args +
                     extra + " 2>&1");
  };
  auto r = generate();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, generate(" --tokenizer " + tokenizer).output);
  EXPECT_EQ(r.output.rfind("the", 0), 0u) << r.output;
  // export finds it the same way (it exported without one, silently).
  r = run_shell("cd " + root + " && " + bin +
                " export --checkpoint work/runs/r --format safetensors --out hf 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(root + "/hf/tokenizer.json")) << r.output;

  std::filesystem::rename(tokenizer, tokenizer + ".moved");
  r = run_shell("cd " + root + " && " + bin +
                " export --checkpoint work/runs/r --format safetensors --out hf2 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::has(r.output, "trillion export: note: no tokenizer exported: the run's "
                                     "shards '"))
      << r.output;
  r = generate();
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(testing::has(r.output, "no tokenizer for --prompt: the run's shards '" + work +
                                         "/runs/data/train.bin' were made with tokenizer "
                                         "'runs/data/tok.json', which is not there (tried "
                                         "'runs/data/tok.json', "))
      << r.output;
  EXPECT_TRUE(testing::has(r.output, "'" + tokenizer + "'")) << r.output;
  std::filesystem::rename(work + "/runs/data", work + "/runs/moved");
  r = generate();
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(testing::has(r.output,
                           "the run's data.path 'runs/data' has no train.bin (tried "
                           "'runs/data/train.bin', '" +
                               work + "/runs/r/runs/data/train.bin'"))
      << r.output;

  r = generate(" --top-k -1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(testing::has(r.output,
                           "--top-k: -1 is not a whole number >= 0 (0 keeps every "
                           "token)"))
      << r.output;
  EXPECT_LT(r.output.size(), 200u) << r.output;
}

TEST(HfTokenizer, ByteLevelAlphabetAndTables) {
  EXPECT_EQ(interop::byte_level_char(' '), "\xC4\xA0");   // U+0120 'Ġ'
  EXPECT_EQ(interop::byte_level_char('\n'), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(interop::byte_level_char('A'), "A");
  EXPECT_EQ(interop::byte_level_char(0xAD), "\xC5\x83");  // U+0143, the last remapped
  EXPECT_EQ(interop::byte_level_char(0xE9), "\xC3\xA9");  // printable Latin-1 stays itself
  std::set<std::string> all;
  for (int b = 0; b < 256; ++b) all.insert(interop::byte_level_char(static_cast<unsigned char>(b)));
  EXPECT_EQ(all.size(), 256u);

  const std::vector<std::string> texts = {
      "the cat sat on the mat; the cat ate the rat. "
      "the the the cat cat"};
  const data::Tokenizer tok = data::Tokenizer::train(texts, 270);
  const auto j = nlohmann::json::parse(interop::hf_tokenizer_json(tok));
  EXPECT_EQ(j["model"]["type"], "BPE");
  EXPECT_EQ(j["model"]["vocab"].size(), 256 + tok.merges().size());
  ASSERT_EQ(j["model"]["merges"].size(), tok.merges().size());
  const auto [l, r] = tok.merges()[0];
  EXPECT_EQ(j["model"]["merges"][0], interop::byte_level_string(tok.token_bytes(l)) + " " +
                                         interop::byte_level_string(tok.token_bytes(r)));
  EXPECT_EQ(j["model"]["vocab"][interop::byte_level_string(tok.token_bytes(256))], 256);
  ASSERT_EQ(j["added_tokens"].size(), 3u);
  EXPECT_EQ(j["added_tokens"][0]["content"], "<|bos|>");
  EXPECT_EQ(j["added_tokens"][0]["id"], tok.bos_id());
  EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][1]["type"], "ByteLevel");
}

}  // namespace
}  // namespace trillion
