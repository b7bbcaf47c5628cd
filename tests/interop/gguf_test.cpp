// GGUF export read back by a reader written here from the GGUF v3 description (ggml
// docs/gguf.md), not from the writer: header, every metadata value, the tensor table (names,
// dims fastest-first, types, 32-byte aligned offsets) and the data: f32 bitwise the checkpoint
// (q/k rows moved from rotate-half to interleaved pairs), f16 and Q8_0 within their rounding.
#include "interop/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <variant>

#include "../train/cli_util.h"
#include "data/tokenizer.h"
#include "model/transformer.h"
#include "train/checkpoint/checkpoint.h"
#include "train/run_config.h"

namespace trillion {
namespace {

using testing::fresh_dir;
using testing::run_trillion;

struct Cursor {
  std::string f;
  size_t at = 0;
  template <typename T>
  T get() {
    EXPECT_LE(at + sizeof(T), f.size());
    T v;
    std::memcpy(&v, f.data() + at, sizeof v);
    at += sizeof v;
    return v;
  }
  std::string str() {
    const uint64_t n = get<uint64_t>();
    std::string s = f.substr(at, n);
    at += n;
    return s;
  }
};

using Value = std::variant<uint32_t, int32_t, float, std::string, std::vector<std::string>,
                           std::vector<int32_t>>;
struct Info {
  std::vector<uint64_t> dims;
  uint32_t type = 0;
  uint64_t offset = 0;
};
struct Gguf {
  uint32_t version = 0;
  std::map<std::string, Value> kv;
  std::map<std::string, Info> tensors;
  std::vector<std::string> order;
  std::string data;
};

Gguf read_gguf(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  Cursor c{ss.str()};
  Gguf g;
  EXPECT_EQ(c.f.substr(0, 4), "GGUF");
  c.at = 4;
  g.version = c.get<uint32_t>();
  const uint64_t n_tensors = c.get<uint64_t>(), n_kv = c.get<uint64_t>();
  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string key = c.str();
    const uint32_t type = c.get<uint32_t>();
    if (type == 4)
      g.kv[key] = c.get<uint32_t>();
    else if (type == 5)
      g.kv[key] = c.get<int32_t>();
    else if (type == 6)
      g.kv[key] = c.get<float>();
    else if (type == 8)
      g.kv[key] = c.str();
    else if (type == 9) {
      const uint32_t et = c.get<uint32_t>();
      const uint64_t n = c.get<uint64_t>();
      if (et == 8) {
        std::vector<std::string> v;
        for (uint64_t k = 0; k < n; ++k) v.push_back(c.str());
        g.kv[key] = v;
      } else {
        EXPECT_EQ(et, 5u) << key;
        std::vector<int32_t> v;
        for (uint64_t k = 0; k < n; ++k) v.push_back(c.get<int32_t>());
        g.kv[key] = v;
      }
    } else {
      ADD_FAILURE() << "unexpected value type " << type << " of " << key;
    }
  }
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const std::string name = c.str();
    Info t;
    const uint32_t nd = c.get<uint32_t>();
    for (uint32_t k = 0; k < nd; ++k) t.dims.push_back(c.get<uint64_t>());
    t.type = c.get<uint32_t>();
    t.offset = c.get<uint64_t>();
    g.tensors[name] = t;
    g.order.push_back(name);
  }
  const uint64_t align = std::get<uint32_t>(g.kv.at("general.alignment"));
  c.at = (c.at + align - 1) / align * align;
  g.data = c.f.substr(c.at);
  return g;
}

struct Fixture {
  RunConfig cfg;
  std::string ckpt, params, tok_path;
};
Fixture make(const std::string& root) {
  Fixture x;
  x.cfg = load_run_config(testing::config_path("tiny.toml"), {"model.vocab_size=300"});
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  Transformer model(x.cfg.model, {1, x.cfg.model.seq_len}, *be, tracker);
  model.init_parameters(5);
  Buffer m1(tracker, MemoryCategory::optimizer, DType::f32, model.parameters().count());
  Buffer m2(tracker, MemoryCategory::optimizer, DType::f32, model.parameters().count());
  CheckpointContents c{&model.parameters(), &m1, &m2, {}, to_toml(x.cfg), {}};
  x.ckpt = write_checkpoint(root + "/run", c, 1);
  x.params =
      std::string(static_cast<const char*>(model.parameters().raw()), model.parameters().bytes());
  const std::vector<std::string> texts = {"the cat sat on the mat, the cat ate the rat"};
  x.tok_path = root + "/tok.json";
  data::Tokenizer::train(texts, 270).save(x.tok_path);
  return x;
}

float param(const Fixture& x, const std::string& name, int64_t row, int64_t col) {
  const TensorTable t = build_parameter_table(x.cfg.model);
  const TensorSpec& s = t.spec(t.index(name));
  float v;
  std::memcpy(&v, x.params.data() + (s.offset + row * s.shape.back() + col) * 4, 4);
  return v;
}

TEST(GgufExport, IndependentReaderSeesHeaderMetadataTableAndData) {
  const std::string root = fresh_dir("gguf");
  const Fixture x = make(root);
  for (const std::string dtype : {"f32", "f16", "q8_0"}) {
    const std::string out = root + "/m-" + dtype + ".gguf";
    const auto r = run_trillion("export --checkpoint " + x.ckpt + " --format gguf --dtype " +
                                dtype + " --out " + out + " --tokenizer " + x.tok_path);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const Gguf g = read_gguf(out);
    EXPECT_EQ(g.version, 3u);
    EXPECT_EQ(std::get<std::string>(g.kv.at("general.architecture")), "llama");
    EXPECT_EQ(std::get<uint32_t>(g.kv.at("llama.embedding_length")), 32u);
    EXPECT_EQ(std::get<uint32_t>(g.kv.at("llama.block_count")), 2u);
    EXPECT_EQ(std::get<uint32_t>(g.kv.at("llama.feed_forward_length")), 64u);
    EXPECT_EQ(std::get<uint32_t>(g.kv.at("llama.attention.head_count")), 4u);
    EXPECT_EQ(std::get<uint32_t>(g.kv.at("llama.attention.head_count_kv")), 2u);
    EXPECT_EQ(std::get<uint32_t>(g.kv.at("llama.context_length")), 32u);
    EXPECT_EQ(std::get<uint32_t>(g.kv.at("llama.rope.dimension_count")), 8u);
    EXPECT_EQ(std::get<float>(g.kv.at("llama.rope.freq_base")), 10000.0f);
    EXPECT_EQ(std::get<float>(g.kv.at("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
    const auto& tokens = std::get<std::vector<std::string>>(g.kv.at("tokenizer.ggml.tokens"));
    const auto& types = std::get<std::vector<int32_t>>(g.kv.at("tokenizer.ggml.token_type"));
    const data::Tokenizer tok = data::Tokenizer::load(x.tok_path);
    ASSERT_EQ(tokens.size(), 300u);
    ASSERT_EQ(types.size(), 300u);
    EXPECT_EQ(tokens[' '], "\xC4\xA0");
    EXPECT_EQ(tokens[tok.bos_id()], "<|bos|>");
    EXPECT_EQ(types[tok.bos_id()], 3);
    EXPECT_EQ(types[65], 1);
    EXPECT_EQ(types[299], 5);
    EXPECT_EQ(std::get<std::vector<std::string>>(g.kv.at("tokenizer.ggml.merges")).size(),
              tok.merges().size());
    EXPECT_EQ(std::get<uint32_t>(g.kv.at("tokenizer.ggml.eos_token_id")),
              static_cast<uint32_t>(tok.eos_id()));

    EXPECT_EQ(g.tensors.size(), 2u + 2 * 9 + 1);
    const Info& q = g.tensors.at("blk.1.attn_q.weight");
    EXPECT_EQ(q.dims, (std::vector<uint64_t>{32, 32}));  // [in, out]: fastest first
    EXPECT_EQ(g.tensors.at("blk.0.attn_k.weight").dims, (std::vector<uint64_t>{32, 16}));
    EXPECT_EQ(g.tensors.at("token_embd.weight").dims, (std::vector<uint64_t>{32, 300}));
    EXPECT_EQ(g.tensors.at("output_norm.weight").type, 0u);  // norms stay f32
    for (const auto& [name, t] : g.tensors) EXPECT_EQ(t.offset % 32, 0u) << name;
    const uint32_t want_type = dtype == "f32" ? 0 : dtype == "f16" ? 1 : 8;
    EXPECT_EQ(q.type, want_type);
    // Output row 2i + j of head h is source row h*HD + j*HD/2 + i (HD = 8).
    for (int64_t row = 0; row < 32; ++row) {
      const int64_t h = row / 8, k = row % 8, src = h * 8 + (k % 2) * 4 + k / 2;
      for (int64_t col = 0; col < 32; ++col) {
        const float want = param(x, "layers.1.attn.wq", src, col);
        float got;
        if (dtype == "f32") {
          std::memcpy(&got, g.data.data() + q.offset + (row * 32 + col) * 4, 4);
          ASSERT_EQ(got, want) << row << "," << col;
        } else if (dtype == "f16") {
          uint16_t hbits;
          std::memcpy(&hbits, g.data.data() + q.offset + (row * 32 + col) * 2, 2);
          got = interop::half_to_float(hbits);
          ASSERT_LE(std::abs(got - want), std::abs(want) / 2048 + 6e-8f) << row << "," << col;
        } else {  // one 34-byte block per row of 32
          const char* block = g.data.data() + q.offset + row * 34;
          uint16_t dbits;
          std::memcpy(&dbits, block, 2);
          const float d = interop::half_to_float(dbits);
          got = d * static_cast<float>(static_cast<int8_t>(block[2 + col]));
          ASSERT_LE(std::abs(got - want), d * 0.5f + std::abs(want) / 1024) << row << "," << col;
        }
      }
    }
    // A tensor without RoPE keeps its rows: v_proj row 3 col 5.
    if (dtype == "f32") {
      const Info& v = g.tensors.at("blk.0.attn_v.weight");
      float got;
      std::memcpy(&got, g.data.data() + v.offset + (3 * 32 + 5) * 4, 4);
      EXPECT_EQ(got, param(x, "layers.0.attn.wv", 3, 5));
    }
  }
}

TEST(GgufExport, HalfConversionRoundsToNearestEven) {
  EXPECT_EQ(interop::float_to_half(1.0f), 0x3C00);
  EXPECT_EQ(interop::float_to_half(-2.0f), 0xC000);
  EXPECT_EQ(interop::float_to_half(65504.0f), 0x7BFF);
  EXPECT_EQ(interop::float_to_half(1e6f), 0x7C00);
  EXPECT_EQ(interop::float_to_half(1.0f + 1.0f / 2048), 0x3C00);  // tie -> even
  EXPECT_EQ(interop::float_to_half(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(interop::half_to_float(0x3555), 0.333251953125f);
  EXPECT_EQ(run_trillion("export --checkpoint /nonexistent --format gguf --out x.gguf").exit_code,
            2);
}

// A MoE checkpoint is refused with one message naming the reason and the alternative, and no
// file is written.
TEST(GgufExport, MoeIsRefusedWithTheSafetensorsAlternative) {
  const std::string root = testing::fresh_dir("gguf_moe");
  const auto train =
      run_trillion("train " + testing::config_path("tiny.toml") + " --run-dir " + root +
                   "/run --set train.steps=2 --set model.n_routed_experts=4"
                   " --set model.top_k=2 --set model.expert_ffn=16");
  ASSERT_EQ(train.exit_code, 0) << train.output;
  const auto r =
      run_trillion("export --checkpoint " + root + "/run --format gguf --out " + root + "/m.gguf");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("is a MoE model: GGUF export is dense only"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("--format safetensors"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(root + "/m.gguf"));
}

}  // namespace
}  // namespace trillion
