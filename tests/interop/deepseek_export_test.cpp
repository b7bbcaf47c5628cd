// The deepseek_v3 export of MLA models (interop/hf_deepseek.h): Hugging Face transformers' own
// DeepseekV3ForCausalLM (tests/interop/hf_deepseek_check.py, run by .venv-tests' Python) loads the
// exported directories of a dense MLA model without query compression, one with query
// compression and an MTP module (tied embeddings), and deepseek-tiny (MLA + MoE with a non-zero
// routing bias, group-limited routing (n_group 4 / topk_group 2) and its MoE MTP module in
// mtp.safetensors) with no missing, unexpected or mismatched weights and no warnings, and computes
// trillion's logits at every position within 1e-4 (f32); the same export with the RoPE rows left
// in trillion's order (TRILLION_EXPORT_WRONG_ROPE_LAYOUT), or read by HF without the group limit
// (n_group = 1), is caught by that comparison. Without Python: the names, the row permutation and
// config.json fields, and import back bitwise (n_group / topk_group included).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../train/cli_util.h"
#include "interop/hf_deepseek.h"
#include "interop/safetensors.h"
#include "tiny_run.h"
#include "train/checkpoint/checkpoint.h"
#include "train/run_config.h"

namespace trillion {
namespace {

using testing::make_tiny_run;
using testing::run_shell;
using testing::run_trillion;
using testing::TinyRun;

const std::vector<int32_t> kIds = {3, 17, 42, 8, 63, 0, 29, 11, 5, 50};

// Gives every router bias of the model values of +-0.1 (init leaves them 0), so the export of
// e_score_correction_bias and HF's use of it in the choice of experts are exercised.
void spread_router_biases(Transformer& model) {
  for (const TensorSpec& s : model.table().specs()) {
    if (!s.name.ends_with("moe.router_bias")) continue;
    float* b = model.parameter_set().param(s.name).data<float>();
    for (int64_t i = 0; i < s.numel(); ++i) b[i] = static_cast<float>(0.1 * std::sin(3.0 * i + 1));
  }
}

// The models under test: configs/deepseek-tiny.toml with overrides.
struct Case {
  const char* name;
  std::vector<std::string> overrides;
};
const Case kDenseNoQ = {"dense_q0",
                        {"model.n_routed_experts=0", "model.q_lora_rank=0", "model.mtp_depth=0"}};
const Case kDenseMtp = {
    "dense_mtp", {"model.n_routed_experts=0", "model.mtp_depth=1", "model.tied_embeddings=true"}};
const Case kMoe = {"moe", {}};

TinyRun make_case(const std::string& root, const Case& c) {
  std::vector<std::string> o = c.overrides;
  o.push_back("model.init_std=0.2");
  return make_tiny_run(root + "/" + c.name, o, "deepseek-tiny.toml", spread_router_biases);
}

std::string export_dir(const TinyRun& run, const std::string& out, const std::string& env = "") {
  const auto r = run_trillion("export --checkpoint " + run.dir + " --out " + out, true, env);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return out;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b, double* largest) {
  double d = 0;
  *largest = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, std::abs(a[i] - b[i]));
    *largest = std::max(*largest, std::abs(a[i]));
  }
  return d;
}

TEST(DeepSeekV3Export, HuggingFaceLoadsItWithoutWarningsAndGivesTrillionsLogits) {
  const std::string python = std::string(TRILLION_SOURCE_DIR) + "/.venv-tests/bin/python";
  if (run_shell(python + " -c 'import torch, transformers' 2>/dev/null").exit_code != 0)
    GTEST_SKIP() << "torch and transformers are not installed in " << python
                 << " (scripts/setup.sh installs them; it skips them without network)";
  const std::string root = testing::fresh_dir("ds_hf");
  std::map<std::string, TinyRun> runs;
  std::string dirs;
  for (const Case& c : {kDenseNoQ, kDenseMtp, kMoe}) {
    runs.emplace(c.name, make_case(root, c));
    dirs += " " + export_dir(runs.at(c.name), root + "/" + c.name + "_hf");
  }
  // deepseek-tiny's checkpoint again, its rope rows written in trillion's (halves) order.
  dirs += " " + export_dir(runs.at("moe"), root + "/moe_wrong_rope_hf",
                           "TRILLION_EXPORT_WRONG_ROPE_LAYOUT=1 ");
  // The unpermuted rows again, now with rope_interleave = false: HF's rotate-halves RoPE reads
  // trillion's own layout, so this must match too (the permutation is the only difference).
  const std::string halves = root + "/moe_halves_hf";
  std::filesystem::create_directories(halves);
  std::filesystem::copy_file(root + "/moe_wrong_rope_hf/model.safetensors",
                             halves + "/model.safetensors");
  auto config = nlohmann::json::parse(testing::slurp(root + "/moe_hf/config.json"));
  config["rope_interleave"] = false;
  std::ofstream(halves + "/config.json") << config.dump(2);
  dirs += " " + halves;
  // deepseek-tiny's export again with n_group = topk_group = 1: HF then routes without the group
  // limit, and its logits must differ from trillion's, so the ids and biases exercise the limit.
  const std::string ungrouped = root + "/moe_ungrouped_hf";
  std::filesystem::create_directories(ungrouped);
  std::filesystem::copy_file(root + "/moe_hf/model.safetensors", ungrouped + "/model.safetensors");
  auto flat = nlohmann::json::parse(testing::slurp(root + "/moe_hf/config.json"));
  EXPECT_EQ(flat["n_group"], 4);
  EXPECT_EQ(flat["topk_group"], 2);
  flat["n_group"] = 1;
  flat["topk_group"] = 1;
  std::ofstream(ungrouped + "/config.json") << flat.dump(2);
  dirs += " " + ungrouped;
  // The MTP module put into model.safetensors (as layer L = 3): what HF must report as unexpected,
  // so the check of the load messages can fail.
  const std::string merged = root + "/dense_mtp_merged_hf";
  std::filesystem::create_directories(merged);
  std::filesystem::copy_file(root + "/dense_mtp_hf/config.json", merged + "/config.json");
  std::vector<interop::StoredTensor> all =
      interop::read_safetensors(root + "/dense_mtp_hf/model.safetensors").tensors;
  for (const auto& t : interop::read_safetensors(root + "/dense_mtp_hf/mtp.safetensors").tensors)
    all.push_back(t);
  interop::write_safetensors(merged + "/model.safetensors", all, {{"format", "pt"}});
  dirs += " " + merged;
  std::string ids;
  for (int32_t id : kIds) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  const auto r = run_shell(python + " " + TRILLION_SOURCE_DIR +
                           "/tests/interop/hf_deepseek_check.py " + ids + dirs + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto hf = nlohmann::json::parse(r.output.substr(r.output.rfind("\n{") + 1));

  auto check = [&](const std::string& run, const std::string& dir, double* diff) {
    SCOPED_TRACE(dir);
    const auto& h = hf.at(root + "/" + dir);
    EXPECT_EQ(h["config"], "DeepseekV3Config");
    EXPECT_EQ(h["model"], "DeepseekV3ForCausalLM");
    EXPECT_EQ(h["missing"], nlohmann::json::array());
    EXPECT_EQ(h["unexpected"], nlohmann::json::array());
    EXPECT_EQ(h["mismatched"], nlohmann::json::array());
    EXPECT_EQ(h["warnings"], nlohmann::json::array());
    std::vector<double> theirs;
    for (const auto& row : h["logits"]) {
      const auto v = row.get<std::vector<double>>();
      theirs.insert(theirs.end(), v.begin(), v.end());
    }
    const TinyRun& t = runs.at(run);
    const std::vector<double> ours = testing::full_logits(t.cfg, t.dir, kIds);
    ASSERT_EQ(theirs.size(), ours.size());
    double largest = 0;
    *diff = max_abs_diff(theirs, ours, &largest);
    std::printf(
        "%-22s HF DeepseekV3ForCausalLM vs trillion, f32, %zu logits: max |diff| %.3g "
        "(largest logit %.3g)\n",
        dir.c_str(), ours.size(), *diff, largest);
    EXPECT_GT(largest, 0.1);  // the logits are not trivially small
  };
  for (const Case& c : {kDenseNoQ, kDenseMtp, kMoe}) {
    double diff = 0;
    check(c.name, std::string(c.name) + "_hf", &diff);
    EXPECT_LT(diff, 1e-4) << c.name;
  }
  // The wrong layout loads just as quietly; only the numbers show it, and they do.
  double wrong = 0;
  check("moe", "moe_wrong_rope_hf", &wrong);
  EXPECT_GT(wrong, 1e-2);
  double halves_diff = 0;
  check("moe", "moe_halves_hf", &halves_diff);
  EXPECT_LT(halves_diff, 1e-4);
  double ungrouped_diff = 0;
  check("moe", "moe_ungrouped_hf", &ungrouped_diff);
  EXPECT_GT(ungrouped_diff, 1e-2);
  const auto& m = hf.at(merged);
  std::printf("MTP in model.safetensors: HF reports %zu unexpected weights and %zu warnings\n",
              m["unexpected"].size(), m["warnings"].size());
  EXPECT_TRUE(testing::has(m["unexpected"].dump(), "\"model.layers.3.eh_proj.weight\""));
  ASSERT_FALSE(m["warnings"].empty());
  EXPECT_TRUE(testing::has(m["warnings"][0].get<std::string>(), "UNEXPECTED"));
}

// The f32 bytes of rows `rows` (each `width` elements) of a parameter starting at `offset`.
std::string f32_rows(const std::string& params, int64_t offset, int64_t width,
                     const std::vector<int64_t>& rows) {
  std::string out;
  for (int64_t r : rows) out += params.substr((offset + r * width) * 4, width * 4);
  return out;
}

std::vector<std::string> names(const interop::SafetensorsFile& f) {
  std::vector<std::string> n;
  for (const auto& t : f.tensors) n.push_back(t.name);
  return n;
}

TEST(DeepSeekV3Export, NamesRowOrderAndConfigAreTheReleasedCheckpoints) {
  const std::string root = testing::fresh_dir("ds_names");
  const TinyRun moe = make_case(root, kMoe);
  const std::string hf = export_dir(moe, root + "/moe_hf");
  const std::string params = testing::slurp(moe.dir + "/params.bin");
  const interop::SafetensorsFile st = interop::read_safetensors(hf + "/model.safetensors");
  const TensorTable& table = build_parameter_table(moe.cfg.model);
  auto spec = [&](const std::string& n) { return table.spec(table.index(n)); };
  auto stored = [&](const std::string& n) {
    const auto* t = st.find(n);
    EXPECT_NE(t, nullptr) << n;
    return t == nullptr ? std::string() : t->bytes;
  };
  // deepseek-tiny: C 32, 4 heads of qk 8 + 4 (rope), v 6; q_lora 16, kv_lora 16. The rope rows
  // of each head (8..11) are stored as pairs: stored 8, 9, 10, 11 = our 8, 10, 9, 11.
  const TensorSpec qb = spec("layers.1.attn.wq_b");
  std::vector<int64_t> rows;
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t r : {0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 9, 11}) rows.push_back(h * 12 + r);
  EXPECT_EQ(stored("model.layers.1.self_attn.q_b_proj.weight"),
            f32_rows(params, qb.offset, 16, rows));
  const TensorSpec kva = spec("layers.1.attn.wkv_a");  // [16 latent + 4 rope, 32]
  rows = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 17, 19};
  EXPECT_EQ(stored("model.layers.1.self_attn.kv_a_proj_with_mqa.weight"),
            f32_rows(params, kva.offset, 32, rows));
  EXPECT_NE(rows, std::vector<int64_t>(kva.shape[0]));  // not the identity
  for (const auto& [ours, theirs] :
       {std::pair{"layers.1.attn.wq_a", "self_attn.q_a_proj.weight"},
        {"layers.1.attn.q_norm", "self_attn.q_a_layernorm.weight"},
        {"layers.1.attn.kv_norm", "self_attn.kv_a_layernorm.weight"},
        {"layers.1.attn.wkv_b", "self_attn.kv_b_proj.weight"},
        {"layers.1.attn.wo", "self_attn.o_proj.weight"},
        {"layers.1.moe.router_bias", "mlp.gate.e_score_correction_bias"}}) {
    const TensorSpec s = spec(ours);
    EXPECT_EQ(stored(std::string("model.layers.1.") + theirs),
              params.substr(s.offset * 4, s.numel() * 4))
        << ours;
  }
  EXPECT_NE(stored("model.layers.1.mlp.gate.e_score_correction_bias"), std::string(32, '\0'));
  EXPECT_EQ(st.tensors.size(), 3u + 3 * 9 + 3 + 2 * (2 + 3 + 3 * 8));  // no other tensors
  const auto j = nlohmann::json::parse(testing::slurp(hf + "/config.json"));
  EXPECT_EQ(j["architectures"][0], "DeepseekV3ForCausalLM");
  EXPECT_EQ(j["model_type"], "deepseek_v3");
  for (const auto& [key, want] :
       std::vector<std::pair<const char*, nlohmann::json>>{{"q_lora_rank", 16},
                                                           {"kv_lora_rank", 16},
                                                           {"qk_nope_head_dim", 8},
                                                           {"qk_rope_head_dim", 4},
                                                           {"v_head_dim", 6},
                                                           {"num_attention_heads", 4},
                                                           {"num_key_value_heads", 4},
                                                           {"n_routed_experts", 8},
                                                           {"n_shared_experts", 1},
                                                           {"num_experts_per_tok", 2},
                                                           {"moe_intermediate_size", 16},
                                                           {"first_k_dense_replace", 1},
                                                           {"n_group", 4},
                                                           {"topk_group", 2},
                                                           {"routed_scaling_factor", 1.0},
                                                           {"norm_topk_prob", true},
                                                           {"scoring_func", "sigmoid"},
                                                           {"rope_interleave", true},
                                                           {"num_nextn_predict_layers", 1},
                                                           {"rope_scaling", nullptr}})
    EXPECT_EQ(j[key], want) << key;

  // The MTP module's block is a MoE block like layer 2: layer 3 of mtp.safetensors under the
  // names of a MoE layer (router, its bias, shared and routed experts), each with its bytes.
  const interop::SafetensorsFile mtp = interop::read_safetensors(hf + "/mtp.safetensors");
  auto mtp_bytes = [&](const std::string& n) {
    const auto* t = mtp.find(n);
    EXPECT_NE(t, nullptr) << n;
    return t == nullptr ? std::string() : t->bytes;
  };
  for (const auto& [ours, theirs] :
       {std::pair{"mtp.0.moe.router", "mlp.gate.weight"},
        {"mtp.0.moe.router_bias", "mlp.gate.e_score_correction_bias"},
        {"mtp.0.moe.shared.w_gate", "mlp.shared_experts.gate_proj.weight"},
        {"mtp.0.moe.shared.w_up", "mlp.shared_experts.up_proj.weight"},
        {"mtp.0.moe.shared.w_down", "mlp.shared_experts.down_proj.weight"}}) {
    const TensorSpec s = spec(ours);
    EXPECT_EQ(mtp_bytes(std::string("model.layers.3.") + theirs),
              params.substr(s.offset * 4, s.numel() * 4))
        << ours;
  }
  EXPECT_NE(mtp_bytes("model.layers.3.mlp.gate.e_score_correction_bias"), std::string(32, '\0'));
  const TensorSpec up = spec("mtp.0.moe.experts.w_up");  // [8, 16, 32]: expert 5's [16, 32]
  EXPECT_EQ(mtp_bytes("model.layers.3.mlp.experts.5.up_proj.weight"),
            params.substr((up.offset + 5 * 16 * 32) * 4, 16 * 32 * 4));
  const TensorSpec down = spec("mtp.0.moe.experts.w_down");  // [8, 32, 16]
  EXPECT_EQ(mtp_bytes("model.layers.3.mlp.experts.7.down_proj.weight"),
            params.substr((down.offset + 7 * 32 * 16) * 4, 32 * 16 * 4));
  // enorm, hnorm, eh_proj, shared_head.norm, embed_tokens, shared_head.head, 2 block norms, 7 MLA
  // tensors, the router and its bias, 3 shared and 3 x 8 routed expert matrices.
  EXPECT_EQ(mtp.tensors.size(), 6u + 2 + 7 + 2 + 3 + 3 * 8);
  EXPECT_EQ(mtp.find("model.layers.3.mlp.gate_proj.weight"), nullptr);

  // Without query compression: q_proj, q_lora_rank null, every layer dense.
  const TinyRun dense = make_case(root, kDenseNoQ);
  const std::string dhf = export_dir(dense, root + "/dense_hf");
  const auto dj = nlohmann::json::parse(testing::slurp(dhf + "/config.json"));
  EXPECT_TRUE(dj["q_lora_rank"].is_null());
  EXPECT_EQ(dj["n_routed_experts"], 0);
  EXPECT_EQ(dj["first_k_dense_replace"], 3);
  const auto dn = names(interop::read_safetensors(dhf + "/model.safetensors"));
  EXPECT_TRUE(std::count(dn.begin(), dn.end(), "model.layers.0.self_attn.q_proj.weight"));
  EXPECT_FALSE(std::count(dn.begin(), dn.end(), "model.layers.0.self_attn.q_a_proj.weight"));
  EXPECT_FALSE(std::filesystem::exists(dhf + "/mtp.safetensors"));
}

// The MTP module is the checkpoint's layer L (= 3 here) as released, in mtp.safetensors, with its
// copies of the (tied) embedding as embed_tokens and shared_head.head; model.safetensors has
// the main model only.
TEST(DeepSeekV3Export, MtpModuleIsLayerLInItsOwnFile) {
  const std::string root = testing::fresh_dir("ds_mtp");
  const TinyRun run = make_case(root, kDenseMtp);
  const std::string hf = export_dir(run, root + "/hf");
  const auto j = nlohmann::json::parse(testing::slurp(hf + "/config.json"));
  EXPECT_EQ(j["num_nextn_predict_layers"], 1);
  for (const std::string& n : names(interop::read_safetensors(hf + "/model.safetensors")))
    EXPECT_FALSE(n.starts_with("model.layers.3.")) << n;
  const interop::SafetensorsFile mtp = interop::read_safetensors(hf + "/mtp.safetensors");
  std::vector<std::string> want = {"model.layers.3.embed_tokens.weight",
                                   "model.layers.3.shared_head.head.weight",
                                   "model.layers.3.shared_head.norm.weight",
                                   "model.layers.3.enorm.weight",
                                   "model.layers.3.hnorm.weight",
                                   "model.layers.3.eh_proj.weight",
                                   "model.layers.3.input_layernorm.weight",
                                   "model.layers.3.post_attention_layernorm.weight",
                                   "model.layers.3.mlp.gate_proj.weight",
                                   "model.layers.3.mlp.up_proj.weight",
                                   "model.layers.3.mlp.down_proj.weight"};
  for (const char* a : {"q_a_proj", "q_a_layernorm", "q_b_proj", "kv_a_proj_with_mqa",
                        "kv_a_layernorm", "kv_b_proj", "o_proj"})
    want.push_back(std::string("model.layers.3.self_attn.") + a + ".weight");
  std::sort(want.begin(), want.end());
  EXPECT_EQ(names(mtp), want);
  const std::string params = testing::slurp(run.dir + "/params.bin");
  const TensorTable& table = build_parameter_table(run.cfg.model);
  const TensorSpec embed = table.spec(table.index("embed"));
  const std::string embed_bytes = params.substr(embed.offset * 4, embed.numel() * 4);
  EXPECT_EQ(mtp.find("model.layers.3.embed_tokens.weight")->bytes, embed_bytes);
  EXPECT_EQ(mtp.find("model.layers.3.shared_head.head.weight")->bytes, embed_bytes);  // tied
  const TensorSpec eh = table.spec(table.index("mtp.0.eh_proj"));
  EXPECT_EQ(mtp.find("model.layers.3.eh_proj.weight")->shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(mtp.find("model.layers.3.eh_proj.weight")->bytes,
            params.substr(eh.offset * 4, eh.numel() * 4));
}

// `trillion import` of each export gives the checkpoint back bitwise (the rope rows un-permuted,
// the MTP module read from mtp.safetensors and its copies checked); what it cannot represent is
// refused by name.
TEST(DeepSeekV3Import, RoundTripIsBitwiseAndRefusesWhatTrillionCannotRepresent) {
  const std::string root = testing::fresh_dir("ds_import");
  for (const Case& c : {kDenseNoQ, kDenseMtp, kMoe}) {
    SCOPED_TRACE(c.name);
    const TinyRun run = make_case(root, c);
    const std::string hf = export_dir(run, root + "/" + c.name + "_hf");
    const auto r = run_trillion("import " + hf + " --out " + root + "/" + c.name + "_back");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string back = root + "/" + c.name + "_back/checkpoints/step_00000000";
    EXPECT_EQ(testing::slurp(back + "/params.bin"), testing::slurp(run.dir + "/params.bin"));
    const RunConfig bc = parse_run_config(read_checkpoint_config(back), back, {});
    EXPECT_TRUE(bc.model.mla);
    EXPECT_EQ(bc.model.mla_dims.q_lora_rank, run.cfg.model.mla_dims.q_lora_rank);
    EXPECT_EQ(bc.model.mla_dims.v_head_dim, 6);
    EXPECT_EQ(bc.model.mtp.depth, run.cfg.model.mtp.depth);
    EXPECT_EQ(bc.model.moe.n_routed_experts, run.cfg.model.moe.n_routed_experts);
    EXPECT_EQ(bc.model.tied_embeddings, run.cfg.model.tied_embeddings);
  }
  // The MTP file missing.
  std::filesystem::remove(root + "/dense_mtp_hf/mtp.safetensors");
  auto r = run_trillion("import " + root + "/dense_mtp_hf --out " + root + "/no_mtp");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(testing::has(r.output, "dense_mtp_hf/mtp.safetensors is missing")) << r.output;
  // rope_interleave = false: the rows are read as stored (an export with the permutation skipped).
  const TinyRun moe_run = make_case(root, kMoe);
  const std::string halves =
      export_dir(moe_run, root + "/halves_hf", "TRILLION_EXPORT_WRONG_ROPE_LAYOUT=1 ");
  auto hj = nlohmann::json::parse(testing::slurp(halves + "/config.json"));
  hj["rope_interleave"] = false;
  std::ofstream(halves + "/config.json") << hj.dump();
  r = run_trillion("import " + halves + " --out " + root + "/halves_back");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::slurp(root + "/halves_back/checkpoints/step_00000000/params.bin"),
            testing::slurp(moe_run.dir + "/params.bin"));
  // Group-limited routing reads back (deepseek-tiny: 4 groups, 2 kept), and a pair the model
  // cannot run is refused by name.
  const std::string moe = root + "/moe_hf";
  const std::string moe_back = root + "/moe_back/checkpoints/step_00000000";
  const RunConfig grouped = parse_run_config(read_checkpoint_config(moe_back), moe_back, {});
  EXPECT_EQ(grouped.model.moe.n_group, 4);
  EXPECT_EQ(grouped.model.moe.topk_group, 2);
  auto j = nlohmann::json::parse(testing::slurp(moe + "/config.json"));
  j["n_group"] = 3;
  j["topk_group"] = 2;
  std::ofstream(moe + "/config.json") << j.dump();
  r = run_trillion("import " + moe + " --out " + root + "/grouped");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(testing::has(r.output,
                           "model.n_group = 3 must be >= 1 and divide "
                           "model.n_routed_experts = 8"))
      << r.output;
}

// A MoE router HF's deepseek_v3 does not have (softmax with an auxiliary loss) is refused.
TEST(DeepSeekV3Export, SoftmaxRouterIsRefusedByName) {
  const std::string root = testing::fresh_dir("ds_softmax");
  const TinyRun run = make_tiny_run(
      root + "/run", {"model.router=softmax_aux", "model.n_group=1", "model.topk_group=1"},
      "deepseek-tiny.toml");
  const auto r = run_trillion("export --checkpoint " + run.dir + " --out " + root + "/hf");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(testing::has(r.output,
                           "has MLA attention and router = \"softmax_aux\": Hugging "
                           "Face's deepseek_v3 routes with sigmoid affinities"))
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(root + "/hf/model.safetensors"));
}

// GGUF writes llama.cpp's llama architecture, which has no MLA: refused, naming safetensors.
TEST(DeepSeekV3Export, GgufOfMlaIsRefusedNamingSafetensors) {
  const std::string root = testing::fresh_dir("ds_gguf");
  const TinyRun run = make_case(root, kDenseNoQ);
  const auto r =
      run_trillion("export --checkpoint " + run.dir + " --format gguf --out " + root + "/m.gguf");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(testing::has(r.output,
                           "has MLA attention: GGUF export writes llama.cpp's llama "
                           "architecture, not its deepseek2; export it with --format "
                           "safetensors"))
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(root + "/m.gguf"));
}

}  // namespace
}  // namespace trillion
