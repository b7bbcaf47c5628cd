// Interop tests: the safetensors export read back by a reader written here from the format spec
// (not the writer's code) gives bitwise the checkpoint's tensors under Hugging Face Llama names;
// import round-trips bitwise; an independent Llama forward (tests/interop/hf_llama_reference.py,
// plain Python from HF's formulas) gives trillion's next-token logits, and a PyTorch Llama
// (tests/interop/torch_llama.py, where PyTorch is installed) its logits at every position; the
// clear errors for bad files. The decoder, generate and tokenizer.json tests are in
// generate_test.cpp.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "../train/cli_util.h"
#include "tiny_run.h"
#include "core/dtype.h"
#include "core/error.h"
#include "interop/hf_llama.h"
#include "interop/safetensors.h"
#include "model/transformer.h"
#include "train/checkpoint/checkpoint.h"
#include "train/run_config.h"

namespace trillion {
namespace {

using testing::fresh_dir;
using testing::run_shell;
using testing::run_trillion;
using testing::make_tiny_run;
using testing::TinyRun;

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ---- an independent safetensors reader, from the format description: u64 LE header size N,
// N bytes of JSON, then the data block that data_offsets index.
struct SpecTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};
struct SpecFile {
  uint64_t header_bytes = 0;
  std::map<std::string, SpecTensor> tensors;
  nlohmann::json metadata;
  std::string data;
};
SpecFile spec_read(const std::string& path) {
  const std::string f = read_bytes(path);
  SpecFile s;
  for (int i = 0; i < 8; ++i) s.header_bytes |= uint64_t(uint8_t(f[i])) << (8 * i);
  const auto h = nlohmann::json::parse(f.substr(8, s.header_bytes));
  for (const auto& [k, v] : h.items()) {
    if (k == "__metadata__") {
      s.metadata = v;
      continue;
    }
    s.tensors[k] = {v["dtype"], v["shape"].get<std::vector<int64_t>>(), v["data_offsets"][0],
                    v["data_offsets"][1]};
  }
  s.data = f.substr(8 + s.header_bytes);
  return s;
}

std::vector<std::string> expected_hf_names(int64_t layers, bool tied) {
  std::vector<std::string> n = {"model.embed_tokens.weight", "model.norm.weight"};
  if (!tied) n.push_back("lm_head.weight");
  for (int64_t l = 0; l < layers; ++l) {
    for (const char* s : {"input_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                          "self_attn.v_proj", "self_attn.o_proj", "post_attention_layernorm",
                          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"})
      n.push_back("model.layers." + std::to_string(l) + "." + s + ".weight");
  }
  std::sort(n.begin(), n.end());
  return n;
}

TEST(SafetensorsExport, IndependentReaderGetsTheCheckpointBitwise) {
  const std::string root = fresh_dir("st_export");
  const TinyRun run = make_tiny_run(root + "/run");
  const auto r = run_trillion("export --checkpoint " + root + "/run --format safetensors --out " +
                              root + "/hf");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const SpecFile s = spec_read(root + "/hf/model.safetensors");
  EXPECT_EQ((8 + s.header_bytes) % 8, 0u);  // data aligned
  std::vector<std::string> names;
  for (const auto& [k, v] : s.tensors) names.push_back(k);
  EXPECT_EQ(names, expected_hf_names(run.cfg.model.n_layers, run.cfg.model.tied_embeddings));
  EXPECT_EQ(s.metadata["format"], "pt");

  const std::string params = read_bytes(run.dir + "/params.bin");
  const TensorTable table = build_parameter_table(run.cfg.model);
  uint64_t covered = 0;
  for (const TensorSpec& spec : table.specs()) {
    const std::string hf = interop::hf_llama_name(spec.name);
    ASSERT_TRUE(s.tensors.count(hf)) << hf;
    const SpecTensor& t = s.tensors.at(hf);
    EXPECT_EQ(t.dtype, "F32");
    EXPECT_EQ(t.shape, spec.shape) << hf;
    ASSERT_EQ(t.end - t.begin, uint64_t(spec.numel()) * 4) << hf;
    EXPECT_EQ(s.data.substr(t.begin, t.end - t.begin),
              params.substr(spec.offset * 4, spec.numel() * 4))
        << hf;
    covered += t.end - t.begin;
  }
  EXPECT_EQ(covered, s.data.size());  // no gaps, nothing extra
  EXPECT_EQ(covered, params.size());

  const auto cfg = nlohmann::json::parse(read_bytes(root + "/hf/config.json"));
  EXPECT_EQ(cfg["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(cfg["hidden_size"], 32);
  EXPECT_EQ(cfg["intermediate_size"], 64);
  EXPECT_EQ(cfg["num_hidden_layers"], 2);
  EXPECT_EQ(cfg["num_attention_heads"], 4);
  EXPECT_EQ(cfg["num_key_value_heads"], 2);
  EXPECT_EQ(cfg["head_dim"], 8);
  EXPECT_EQ(cfg["vocab_size"], 64);
  EXPECT_EQ(cfg["max_position_embeddings"], 32);
  EXPECT_EQ(cfg["rope_theta"], 10000.0);
  EXPECT_EQ(cfg["rms_norm_eps"], 1e-5);
  EXPECT_EQ(cfg["tie_word_embeddings"], false);
  EXPECT_TRUE(std::filesystem::exists(root + "/hf/generation_config.json"));
}

TEST(SafetensorsExport, Bf16IsTheRoundedF32) {
  const std::string root = fresh_dir("st_bf16");
  const TinyRun run = make_tiny_run(root + "/run");
  ASSERT_EQ(run_trillion("export --checkpoint " + run.dir + " --out " + root + "/hf --dtype bf16")
                .exit_code,
            0);
  const SpecFile s = spec_read(root + "/hf/model.safetensors");
  const std::string params = read_bytes(run.dir + "/params.bin");
  const TensorTable table = build_parameter_table(run.cfg.model);
  const TensorSpec& wq = table.spec(table.index("layers.1.attn.wq"));
  const SpecTensor& t = s.tensors.at("model.layers.1.self_attn.q_proj.weight");
  ASSERT_EQ(t.dtype, "BF16");
  ASSERT_EQ(t.end - t.begin, uint64_t(wq.numel()) * 2);
  for (int64_t i = 0; i < wq.numel(); ++i) {
    float f;
    std::memcpy(&f, params.data() + (wq.offset + i) * 4, 4);
    uint16_t got;
    std::memcpy(&got, s.data.data() + t.begin + i * 2, 2);
    ASSERT_EQ(got, float_to_bf16(f).bits) << i;
    ASSERT_LE(std::abs(bf16_to_float(bf16{got}) - f), std::abs(f) * (1.0 / 256)) << i;
  }
}

TEST(SafetensorsImport, RoundTripIsBitwiseAndGenerates) {
  const std::string root = fresh_dir("st_import");
  const TinyRun run = make_tiny_run(root + "/run", {"model.tied_embeddings=true"});
  ASSERT_EQ(run_trillion("export --checkpoint " + root + "/run --out " + root + "/hf").exit_code,
            0);
  const auto r =
      run_trillion("import --format safetensors " + root + "/hf --out " + root + "/back");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string back = root + "/back/checkpoints/step_00000000";
  EXPECT_EQ(read_bytes(back + "/params.bin"), read_bytes(run.dir + "/params.bin"));
  const RunConfig cfg = parse_run_config(read_checkpoint_config(back), back, {});
  EXPECT_TRUE(cfg.model.tied_embeddings);
  EXPECT_EQ(cfg.model.n_kv_heads, 2);
  const std::string args = " --prompt-ids '5 6 7' --max-tokens 12 --temperature 0";
  const auto a = run_trillion("generate --checkpoint " + back + args, false);
  const auto b = run_trillion("generate --checkpoint " + run.dir + args, false);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(a.output, b.output);
}

// Issue 39 item 17: a tensor named twice (JSON keeps one copy silently), tensors the model has no
// place for, and a NaN weight were all imported (the NaN then exported and generated). Each is now
// refused by name with nothing written; --allow-unknown leaves the unknown ones out.
TEST(SafetensorsImport, RefusesDuplicateUnknownAndNonFiniteTensors) {
  const std::string root = fresh_dir("st_import_bad");
  const TinyRun run = make_tiny_run(root + "/run");
  ASSERT_EQ(run_trillion("export --checkpoint " + run.dir + " --out " + root + "/hf").exit_code, 0);
  const interop::SafetensorsFile good = interop::read_safetensors(root + "/hf/model.safetensors");
  // A copy of the export with model.safetensors replaced by `bytes` (or `tensors`).
  auto variant = [&](const std::string& name, const std::string& bytes) {
    const std::string dir = root + "/" + name;
    std::filesystem::create_directories(dir);
    std::filesystem::copy_file(root + "/hf/config.json", dir + "/config.json");
    std::ofstream(dir + "/model.safetensors", std::ios::binary) << bytes;
    return dir;
  };
  auto written = [&](std::vector<interop::StoredTensor> tensors) {
    interop::write_safetensors(root + "/tmp.safetensors", tensors, {});
    return read_bytes(root + "/tmp.safetensors");
  };
  auto import = [&](const std::string& dir, const std::string& extra = "") {
    return run_trillion("import " + dir + " --out " + dir + "_run" + extra);
  };

  // The same name twice: the second entry points at other bytes.
  const std::string file = read_bytes(root + "/hf/model.safetensors");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(file[i]);
  std::string header = file.substr(8, n);
  header.insert(1, R"("model.norm.weight":{"dtype":"F32","shape":[32],"data_offsets":[0,128]},)");
  std::string length(8, '\0');
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  const std::string dup = variant("dup", length + header + file.substr(8 + n));
  auto r = import(dup);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(testing::has(r.output, "'model.norm.weight' appears twice in the header"))
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(dup + "_run"));

  // An extra tensor (a bias trillion's Llama does not have).
  std::vector<interop::StoredTensor> tensors = good.tensors;
  tensors.push_back({"model.layers.0.self_attn.q_proj.bias", "F32", {32}, std::string(128, '\0')});
  const std::string extra = variant("extra", written(tensors));
  r = import(extra);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(testing::has(r.output,
                           "1 tensor(s) that config.json's model has no place for: "
                           "'model.layers.0.self_attn.q_proj.bias'; pass "
                           "--allow-unknown"))
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(extra + "_run"));
  r = import(extra, " --allow-unknown");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::has(r.output, "left out tensor 'model.layers.0.self_attn.q_proj.bias'"))
      << r.output;
  EXPECT_EQ(read_bytes(extra + "_run/checkpoints/step_00000000/params.bin"),
            read_bytes(run.dir + "/params.bin"));

  // A NaN weight, and an F64 value that does not fit the f32 model.
  for (const auto& [dtype, value, want] :
       {std::tuple<std::string, double, std::string>{"F32", std::nan(""), "element 5 is nan"},
        {"F64", 1e300, "element 5 = 1e+300 overflows f32"}}) {
    tensors = good.tensors;
    for (interop::StoredTensor& t : tensors) {
      if (t.name != "model.layers.1.self_attn.q_proj.weight") continue;
      std::string bytes;
      for (size_t i = 0; i < t.bytes.size() / 4; ++i) {
        float f;
        std::memcpy(&f, t.bytes.data() + i * 4, 4);
        const double d = i == 5 ? value : f;
        const float g = static_cast<float>(d);
        bytes += dtype == "F64" ? std::string(reinterpret_cast<const char*>(&d), 8)
                                : std::string(reinterpret_cast<const char*>(&g), 4);
      }
      t.dtype = dtype;
      t.bytes = bytes;
    }
    const std::string bad = variant("bad_" + dtype, written(tensors));
    r = import(bad);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(testing::has(r.output, "tensor 'model.layers.1.self_attn.q_proj.weight' " + want))
        << r.output;
    EXPECT_FALSE(std::filesystem::exists(bad + "_run"));
  }
}

std::vector<double> trillion_logits(const RunConfig& cfg, const std::string& ckpt,
                                    const std::vector<int32_t>& ids) {
  return testing::full_logits(cfg, ckpt, ids);
}

const std::vector<int32_t> kReferenceIds = {3, 17, 42, 8, 63, 0, 29, 11, 5, 50};

// Largest |ref - ours| over the logits `ref` holds (the last position, or all of them) and the
// largest |ref| (so a test sees the logits are not trivially zero).
struct LogitDiff {
  double max_diff = 0, max_abs = 0;
};
LogitDiff compare_logits(const std::vector<double>& ref, const std::vector<double>& ours) {
  LogitDiff d;
  const size_t offset = ours.size() - ref.size();  // ref = the last ref.size() values of ours
  for (size_t i = 0; i < ref.size(); ++i) {
    d.max_diff = std::max(d.max_diff, std::abs(ref[i] - ours[offset + i]));
    d.max_abs = std::max(d.max_abs, std::abs(ref[i]));
  }
  return d;
}

TEST(HfLlamaReference, PlainPythonLlamaGivesTheSameNextTokenLogits) {
  if (run_shell("python3 -c 'import json' 2>/dev/null").exit_code != 0)
    GTEST_SKIP() << "no python3";
  const std::string root = fresh_dir("st_reference");
  const TinyRun run = make_tiny_run(root + "/run", {"model.init_std=0.2"});
  ASSERT_EQ(run_trillion("export --checkpoint " + run.dir + " --out " + root + "/hf").exit_code, 0);
  std::string cmd = "python3 " + std::string(TRILLION_SOURCE_DIR) +
                    "/tests/interop/hf_llama_reference.py " + root + "/hf";
  for (int32_t id : kReferenceIds) cmd += fmt::format(" {}", id);
  const auto r = run_shell(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto ref = nlohmann::json::parse(r.output).get<std::vector<double>>();
  ASSERT_EQ(ref.size(), static_cast<size_t>(run.cfg.model.vocab_size));
  const LogitDiff d = compare_logits(ref, trillion_logits(run.cfg, run.dir, kReferenceIds));
  EXPECT_LT(d.max_diff, 1e-4) << "largest logit " << d.max_abs;
  EXPECT_GT(d.max_abs, 0.1);
}

// The Python with PyTorch: scripts/setup.sh's .venv-tests (torch from PyPI), else the system
// interpreter (Debian's python3-torch, scripts/setup.sh --with-torch); "" when neither has it.
std::string torch_python() {
  for (const std::string& python : {std::string(TRILLION_SOURCE_DIR) + "/.venv-tests/bin/python",
                                    std::string("/usr/bin/python3")}) {
    if (run_shell(python + " -c 'import torch' 2>/dev/null").exit_code == 0) return python;
  }
  return "";
}

// The PyTorch Llama of tests/interop/torch_llama.py (nn.Modules built from config.json) on a
// checkpoint trained for 20 steps by `trillion train` computes trillion's logits at every
// position, in f32.
TEST(HfLlamaReference, PyTorchLlamaGivesTheSameNextTokenLogits) {
  const std::string python = torch_python();
  if (python.empty()) {
    GTEST_SKIP() << "PyTorch is not installed in .venv-tests or for /usr/bin/python3 "
                    "(scripts/setup.sh installs it); the plain Python reference test checks the "
                    "same formulas";
  }
  const std::string root = fresh_dir("st_torch");
  const auto train = run_trillion("train " + testing::config_path("tiny.toml") + " --run-dir " +
                                  root + "/run --set model.n_layers=3 --set model.init_std=0.2");
  ASSERT_EQ(train.exit_code, 0) << train.output;
  const auto ex = run_trillion("export --checkpoint " + root + "/run --out " + root + "/hf");
  ASSERT_EQ(ex.exit_code, 0) << ex.output;
  const std::string ckpt = root + "/run/checkpoints/step_00000020";
  const RunConfig cfg = parse_run_config(read_checkpoint_config(ckpt), ckpt, {});
  ASSERT_EQ(cfg.model.dtype, DType::f32);
  std::string cmd = python + " " + std::string(TRILLION_SOURCE_DIR) +
                    "/tests/interop/torch_llama.py " + root + "/hf";
  for (int32_t id : kReferenceIds) cmd += fmt::format(" {}", id);
  const auto r = run_shell(cmd + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rows = nlohmann::json::parse(r.output).get<std::vector<std::vector<double>>>();
  ASSERT_EQ(rows.size(), kReferenceIds.size());
  std::vector<double> ref;
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), static_cast<size_t>(cfg.model.vocab_size));
    ref.insert(ref.end(), row.begin(), row.end());
  }
  const LogitDiff d = compare_logits(ref, trillion_logits(cfg, ckpt, kReferenceIds));
  std::printf(
      "PyTorch vs trillion, f32, %zu positions x %lld logits: max |diff| %.3g (largest "
      "logit %.3g)\n",
      rows.size(), static_cast<long long>(cfg.model.vocab_size), d.max_diff, d.max_abs);
  RecordProperty("max_abs_diff", std::to_string(d.max_diff));
  EXPECT_LT(d.max_diff, 1e-4) << "largest logit " << d.max_abs;
  EXPECT_GT(d.max_abs, 0.1);
}

// ---- MoE: DeepSeek-V3 names. A tiny MoE (layer 0 dense, layer 1: 1 shared + 4 routed experts,
// top-2, sigmoid router with its correction bias, group-limited: 2 groups of 2 experts, 1 kept)
// trained 20 steps, so the router bias has moved.
const char* kMoeTrain =
    " --set model.n_dense_layers=1 --set model.n_routed_experts=4 --set model.n_shared_experts=1"
    " --set model.top_k=2 --set model.expert_ffn=16 --set model.init_std=0.2"
    " --set model.bias_update_rate=0.01 --set model.n_group=2 --set model.topk_group=1";

std::string train_tiny_moe(const std::string& run_dir) {
  const auto r = run_trillion("train " + testing::config_path("tiny.toml") + " --run-dir " +
                              run_dir + kMoeTrain);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return run_dir + "/checkpoints/step_00000020";
}

// The bytes of elements [first, first + count) of params.bin (f32).
std::string f32_range(const std::string& params, int64_t first, int64_t count) {
  return params.substr(first * 4, count * 4);
}

TEST(SafetensorsExport, MoeHasDeepSeekV3NamesAndTheCheckpointBitwise) {
  const std::string root = fresh_dir("st_moe");
  const std::string ckpt = train_tiny_moe(root + "/run");
  const auto ex = run_trillion("export --checkpoint " + ckpt + " --out " + root + "/hf");
  ASSERT_EQ(ex.exit_code, 0) << ex.output;
  const SpecFile s = spec_read(root + "/hf/model.safetensors");
  const std::string params = read_bytes(ckpt + "/params.bin");
  const RunConfig cfg = parse_run_config(read_checkpoint_config(ckpt), ckpt, {});
  const TensorTable table = build_parameter_table(cfg.model);
  auto offset = [&](const std::string& n) { return table.spec(table.index(n)).offset; };
  const int64_t C = 32, FE = 16, E = 4;
  // Expected name -> (first element in params.bin, shape), written out from the table's layout.
  std::map<std::string, std::pair<int64_t, std::vector<int64_t>>> want = {
      {"model.layers.0.mlp.gate_proj.weight", {offset("layers.0.mlp.w_gate"), {64, C}}},
      {"model.layers.0.mlp.up_proj.weight", {offset("layers.0.mlp.w_up"), {64, C}}},
      {"model.layers.0.mlp.down_proj.weight", {offset("layers.0.mlp.w_down"), {C, 64}}},
      {"model.layers.1.mlp.gate.weight", {offset("layers.1.moe.router"), {E, C}}},
      {"model.layers.1.mlp.gate.e_score_correction_bias",
       {offset("layers.1.moe.router_bias"), {E}}},
      {"model.layers.1.mlp.shared_experts.gate_proj.weight",
       {offset("layers.1.moe.shared.w_gate"), {FE, C}}},
      {"model.layers.1.mlp.shared_experts.up_proj.weight",
       {offset("layers.1.moe.shared.w_up"), {FE, C}}},
      {"model.layers.1.mlp.shared_experts.down_proj.weight",
       {offset("layers.1.moe.shared.w_down"), {C, FE}}},
  };
  for (int64_t e = 0; e < E; ++e) {
    auto name = [&](const char* proj) {
      return fmt::format("model.layers.1.mlp.experts.{}.{}_proj.weight", e, proj);
    };
    want[name("gate")] = {offset("layers.1.moe.experts.w_gate") + e * FE * C, {FE, C}};
    want[name("up")] = {offset("layers.1.moe.experts.w_up") + e * FE * C, {FE, C}};
    want[name("down")] = {offset("layers.1.moe.experts.w_down") + e * C * FE, {C, FE}};
  }
  uint64_t covered = 0;
  for (const auto& [name, where] : want) {
    ASSERT_TRUE(s.tensors.count(name)) << name;
    const SpecTensor& t = s.tensors.at(name);
    EXPECT_EQ(t.dtype, "F32") << name;
    EXPECT_EQ(t.shape, where.second) << name;
    int64_t n = 1;
    for (int64_t d : where.second) n *= d;
    ASSERT_EQ(t.end - t.begin, uint64_t(n) * 4) << name;
    EXPECT_EQ(s.data.substr(t.begin, t.end - t.begin), f32_range(params, where.first, n)) << name;
    covered += t.end - t.begin;
  }
  // The router bias moved during training (so the bitwise check above is not of zeros).
  const std::string bias = f32_range(params, offset("layers.1.moe.router_bias"), E);
  EXPECT_NE(bias, std::string(static_cast<size_t>(E) * 4, '\0'));
  // Every other tensor is a dense Llama name; all bytes accounted for, none twice.
  for (const auto& [name, t] : s.tensors) {
    if (!want.count(name)) covered += t.end - t.begin;
    EXPECT_EQ(name.find("moe"), std::string::npos) << name;
  }
  EXPECT_EQ(s.tensors.size(),
            want.size() + 2 * 6 + 3);  // 2 x (attention, 2 norms); embed, norm, head
  EXPECT_EQ(covered, s.data.size());
  EXPECT_EQ(covered, params.size());

  const auto j = nlohmann::json::parse(read_bytes(root + "/hf/config.json"));
  EXPECT_EQ(j["architectures"][0], "TrillionMoeForCausalLM");
  EXPECT_EQ(j["model_type"], "trillion_moe");
  EXPECT_EQ(j["n_routed_experts"], 4);
  EXPECT_EQ(j["n_shared_experts"], 1);
  EXPECT_EQ(j["num_experts_per_tok"], 2);
  EXPECT_EQ(j["moe_intermediate_size"], 16);
  EXPECT_EQ(j["first_k_dense_replace"], 1);
  EXPECT_EQ(j["intermediate_size"], 64);
  EXPECT_EQ(j["scoring_func"], "sigmoid");
  EXPECT_EQ(j["topk_method"], "noaux_tc");
  EXPECT_EQ(j["norm_topk_prob"], true);
  EXPECT_EQ(j["routed_scaling_factor"], 1.0);

  // Import gives the checkpoint back bitwise, with the same MoE config.
  const auto im =
      run_trillion("import --format safetensors " + root + "/hf --out " + root + "/back");
  ASSERT_EQ(im.exit_code, 0) << im.output;
  const std::string back = root + "/back/checkpoints/step_00000000";
  EXPECT_EQ(read_bytes(back + "/params.bin"), params);
  const RunConfig bc = parse_run_config(read_checkpoint_config(back), back, {});
  EXPECT_EQ(bc.model.moe.n_routed_experts, 4);
  EXPECT_EQ(bc.model.moe.n_dense_layers, 1);
  EXPECT_EQ(bc.model.moe.router, "sigmoid_bias");
  EXPECT_EQ(bc.model.moe.bias_update_rate, 0.01);
}

// The PyTorch model of torch_llama.py with DeepSeek-V3's MoE layer computes trillion's logits
// at every position of the tiny trained MoE.
TEST(HfLlamaReference, PyTorchDeepSeekMoeGivesTheSameLogits) {
  const std::string python = torch_python();
  if (python.empty())
    GTEST_SKIP() << "PyTorch is not installed in .venv-tests or for /usr/bin/python3 "
                    "(scripts/setup.sh installs it)";
  const std::string root = fresh_dir("st_moe_torch");
  const std::string ckpt = train_tiny_moe(root + "/run");
  ASSERT_EQ(run_trillion("export --checkpoint " + ckpt + " --out " + root + "/hf").exit_code, 0);
  const RunConfig cfg = parse_run_config(read_checkpoint_config(ckpt), ckpt, {});
  std::string cmd = python + " " + std::string(TRILLION_SOURCE_DIR) +
                    "/tests/interop/torch_llama.py " + root + "/hf";
  for (int32_t id : kReferenceIds) cmd += fmt::format(" {}", id);
  const auto r = run_shell(cmd + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<double> ref;
  for (const auto& row : nlohmann::json::parse(r.output).get<std::vector<std::vector<double>>>())
    ref.insert(ref.end(), row.begin(), row.end());
  ASSERT_EQ(ref.size(), kReferenceIds.size() * cfg.model.vocab_size);
  const LogitDiff d = compare_logits(ref, trillion_logits(cfg, ckpt, kReferenceIds));
  std::printf("PyTorch DeepSeek-V3 MoE vs trillion, f32: max |diff| %.3g (largest logit %.3g)\n",
              d.max_diff, d.max_abs);
  RecordProperty("max_abs_diff", std::to_string(d.max_diff));
  EXPECT_LT(d.max_diff, 1e-4) << "largest logit " << d.max_abs;
  EXPECT_GT(d.max_abs, 0.1);
}

TEST(SafetensorsReader, BadFilesAreClearErrors) {
  const std::string root = fresh_dir("st_bad");
  std::filesystem::create_directories(root);
  auto write = [&](const std::string& bytes) {
    std::ofstream(root + "/x.safetensors", std::ios::binary) << bytes;
    return root + "/x.safetensors";
  };
  auto message = [&](const std::string& bytes) {
    try {
      interop::read_safetensors(write(bytes));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("abc").find("shorter than the 8-byte header length"), std::string::npos);
  EXPECT_NE(message(std::string("\xff\0\0\0\0\0\0\0{}", 10)).find("runs past the file"),
            std::string::npos);
  const std::string h = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  std::string len(8, '\0');
  len[0] = static_cast<char>(h.size());
  EXPECT_NE(message(len + h + std::string(8, '\0')).find("tensor 'w': data_offsets [0, 16]"),
            std::string::npos);
  EXPECT_EQ(message(len + h + std::string(16, '\0')), "no error");
  const std::string twice = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                            R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  len[0] = static_cast<char>(twice.size());
  EXPECT_NE(message(len + twice + std::string(8, '\0')).find("'w' appears twice in the header"),
            std::string::npos);
}

TEST(HfLlamaConfig, ParsesWhatItWritesAndNamesBadFields) {
  ModelConfig m = load_run_config(testing::config_path("tiny.toml"), {}).model;
  m.validate();
  ModelConfig back;
  interop::parse_hf_llama_config(interop::hf_llama_config_json(m, "float32", 1, 2), "c.json", back);
  EXPECT_EQ(back.vocab_size, m.vocab_size);
  EXPECT_EQ(back.d_model, m.d_model);
  EXPECT_EQ(back.n_layers, m.n_layers);
  EXPECT_EQ(back.n_heads, m.n_heads);
  EXPECT_EQ(back.n_kv_heads, m.n_kv_heads);
  EXPECT_EQ(back.head_dim, m.head_dim);
  EXPECT_EQ(back.ffn_hidden, m.ffn_hidden);
  EXPECT_EQ(back.seq_len, m.seq_len);
  EXPECT_EQ(back.rope_theta, m.rope_theta);
  EXPECT_EQ(back.norm_eps, m.norm_eps);
  try {
    interop::parse_hf_llama_config(R"({"model_type":"llama","hidden_size":8})", "c.json", back);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "c.json: field 'vocab_size' is missing");
  }
  EXPECT_THROW(interop::parse_hf_llama_config(R"({"model_type":"gpt2"})", "c.json", back), Error);
  EXPECT_EQ(interop::hf_llama_name("layers.3.moe.router"), "model.layers.3.mlp.gate.weight");
  EXPECT_THROW(interop::hf_llama_name("layers.0.moe.experts.w_up"), Error);  // split per expert
  EXPECT_THROW(interop::hf_llama_name("layers.0.attn.bq"), Error);
  // A MoE config.json: its MoE fields by name, and what trillion cannot run refused by name.
  std::string moe = interop::hf_llama_config_json(m, "float32", 1, 2);
  moe = moe.substr(0, moe.rfind('}')) + R"(, "model_type": "trillion_moe", "n_routed_experts": 4})";
  auto error_of = [&](const std::string& text) -> std::string {
    try {
      interop::parse_hf_llama_config(text, "c.json", back);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  auto parsed = nlohmann::json::parse(moe);  // duplicate keys: the last wins
  EXPECT_EQ(error_of(parsed.dump()), "c.json: field 'num_experts_per_tok' is missing");
  parsed["num_experts_per_tok"] = 2;
  parsed["moe_intermediate_size"] = 16;
  EXPECT_EQ(error_of(parsed.dump()), "");
  EXPECT_EQ(back.moe.n_routed_experts, 4);
  EXPECT_EQ(back.moe.router, "sigmoid_bias");
  EXPECT_EQ(back.moe.n_group, 1);  // absent: no groups
  parsed["n_group"] = 2;           // group-limited routing: topk_group defaults to n_group
  EXPECT_EQ(error_of(parsed.dump()), "");
  EXPECT_EQ(back.moe.n_group, 2);
  EXPECT_EQ(back.moe.topk_group, 2);
  parsed["topk_group"] = 1;
  EXPECT_EQ(error_of(parsed.dump()), "");
  EXPECT_EQ(back.moe.topk_group, 1);
  parsed["n_group"] = 1;
  parsed.erase("topk_group");
  parsed["scoring_func"] = "tanh";
  EXPECT_NE(error_of(parsed.dump()).find("scoring_func \"tanh\""), std::string::npos);
}

}  // namespace
}  // namespace trillion
