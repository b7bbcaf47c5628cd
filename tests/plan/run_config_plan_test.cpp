// Planning from engine run configs (cli/plan_run_config.h): every run config under configs/ is
// read by the engine's own parser, and its planned parameter count equals the engine's parameter
// table (and, for the small ones, the parameter buffer the engine allocates), MoE included; the
// planner's model files (configs/models/) still read as model files; keys are sorted into used
// and ignored by what changes the plan; `trillion plan --json` lists them.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../train/cli_util.h"
#include "backend/backend.h"
#include "cli/plan_run_config.h"
#include "core/memory.h"
#include "data/file_io.h"
#include "model/parameters.h"
#include "model/transformer.h"
#include "plan/model_file.h"

namespace trillion::cli {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> tomls_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".toml") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// Every configs/*.toml is a run config; the planner's count is the engine's table, and for the
// small models the engine's allocated parameter buffer; where the planner's own model-file
// reader also reads the file (dense models), it agrees.
TEST(RunConfigPlan, EveryRunConfigCountsTheEnginesTable) {
  int moe = 0, runs = 0;
  for (const std::string& path : tomls_in(TRILLION_SOURCE_DIR "/configs")) {
    SCOPED_TRACE(path);
    const std::string text = data::read_file_raw(path);
    ASSERT_TRUE(is_run_config_text(text, path));
    std::optional<RunConfigModel> r;
    const plan::ModelSpec m = resolve_plan_model(path, &r);
    ASSERT_TRUE(r.has_value());
    ++runs;
    const RunConfig config = load_run_config(path, {});
    const TensorTable table = build_parameter_table(config.model);
    const int64_t total = plan::count_model(m).total;
    EXPECT_EQ(total, table.total_elements());
    EXPECT_EQ(m.name, fs::path(path).stem().string());
    EXPECT_EQ(m.default_batch_tokens,
              static_cast<double>(config.train.micro_batch * config.train.grad_accum *
                                  config.model.seq_len));
    EXPECT_EQ(r->tokens, m.default_batch_tokens * static_cast<double>(config.train.steps));
    if (total < 2'000'000) {
      MemoryTracker tracker;
      auto be = make_cpu_backend(tracker);
      ParameterSet params(table, {}, config.model.dtype, *be, tracker);
      EXPECT_EQ(params.parameters().bytes(),
                static_cast<size_t>(total) * dtype_size(config.model.dtype));
    }
    if (m.is_moe()) {
      ++moe;
      EXPECT_TRUE(contains(r->used, "model.n_routed_experts"));
    } else if (m.mtp_depth == 0) {  // the model-file reader has no MTP loss-weight keys
      EXPECT_EQ(plan::count_model(plan::read_model_file(path)).total, total);
    }
    // Every key the file sets is named once: used, ignored or at the engine's default.
    const RunConfigKeys keys = run_config_keys(text, path);
    EXPECT_EQ(r->used.size() + r->ignored.size() + r->at_default.size(), keys.keys.size());
  }
  EXPECT_GE(runs, 10);
  EXPECT_GE(moe, 2);  // moe-tiny, moe-brown
}

// configs/models/*.toml have only [model]: read by the planner's model-file reader, as before.
TEST(RunConfigPlan, ModelFilesStillReadAsModelFiles) {
  for (const std::string& path : tomls_in(TRILLION_SOURCE_DIR "/configs/models")) {
    SCOPED_TRACE(path);
    EXPECT_FALSE(is_run_config_text(data::read_file_raw(path), path));
    std::optional<RunConfigModel> r;
    const plan::ModelSpec m = resolve_plan_model(path, &r);
    EXPECT_FALSE(r.has_value());
    EXPECT_EQ(m, plan::read_model_file(path));
    EXPECT_EQ(plan::count_model(m).total, plan::count_model(plan::find_model(m.name)).total);
  }
}

// What changes the plan is used, the rest ignored: dimensions, experts, the router kind, the
// attention kernel, batch and steps are used; numerics, data, optimizer and layout keys (the
// planner searches the layout) are ignored; a string set to the engine's default (router =
// "sigmoid_bias"), which no variant can test, is named as at the default.
TEST(RunConfigPlan, KeysThatChangeThePlanAreUsedTheRestIgnored) {
  const std::string base =
      "[model]\nvocab_size = 64\nd_model = 32\nn_layers = 3\nn_heads = 4\nn_kv_heads = 2\n"
      "ffn_hidden = 64\nseq_len = 32\nrope_theta = 500000.0\nrecompute = \"selective\"\n"
      "n_dense_layers = 1\nn_routed_experts = 8\nn_shared_experts = 1\ntop_k = 2\n"
      "expert_ffn = 16\ncapacity_factor = 1.25\n";
  const std::string rest =
      "[train]\nmicro_batch = 4\ngrad_accum = 2\nsteps = 10\nseed = 7\n[optim]\nlr = 1e-3\n"
      "[data]\nsource = \"shards\"\npath = \"runs/nowhere\"\n[parallel]\ndp = 2\nzero = 1\n";
  const RunConfigModel softmax = read_run_config_model(
      base + "router = \"softmax_aux\"\nattention = \"materialized\"\n" + rest, "h36-a.toml");
  for (const char* used :
       {"model.vocab_size", "model.d_model", "model.n_layers", "model.n_heads", "model.n_kv_heads",
        "model.ffn_hidden", "model.seq_len", "model.n_dense_layers", "model.n_routed_experts",
        "model.n_shared_experts", "model.top_k", "model.expert_ffn", "model.router",
        "model.attention", "train.micro_batch", "train.grad_accum", "train.steps"})
    EXPECT_TRUE(contains(softmax.used, used)) << used;
  for (const char* ignored :
       {"model.rope_theta", "model.recompute", "model.capacity_factor", "train.seed", "optim.lr",
        "data.source", "data.path", "parallel.dp", "parallel.zero"})
    EXPECT_TRUE(contains(softmax.ignored, ignored)) << ignored;
  EXPECT_FALSE(softmax.model.router_bias);
  EXPECT_EQ(softmax.model.attention_kernel, plan::AttentionKernel::kMaterialised);
  EXPECT_EQ(softmax.model.default_batch_tokens, 4 * 2 * 32);
  EXPECT_EQ(softmax.tokens, 10 * 4 * 2 * 32);
  const RunConfigModel sigmoid =
      read_run_config_model(base + "router = \"sigmoid_bias\"\n" + rest, "h36-b.toml");
  EXPECT_TRUE(contains(sigmoid.at_default, "model.router"));
  EXPECT_TRUE(softmax.at_default.empty());
  EXPECT_TRUE(sigmoid.model.router_bias);
  // The router's bias is a row of the table: E values per MoE layer.
  EXPECT_EQ(plan::count_model(sigmoid.model).total - plan::count_model(softmax.model).total, 8 * 2);
}

// A config the engine refuses is refused with the engine's message; a [model]-only file with an
// engine-only key is a model file, whose message says how to plan a run config.
TEST(RunConfigPlan, BadConfigsGetTheEnginesMessage) {
  const std::string model =
      "[model]\nvocab_size = 64\nd_model = 32\nn_layers = 2\nn_heads = 4\nffn_hidden = 64\n"
      "seq_len = 32\n";
  auto error_of = [](const std::string& text) {
    try {
      read_run_config_model(text, "h36-bad.toml");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of(model + "[train]\nmicro_batchh = 4\n").find("train.micro_batchh"),
            std::string::npos);
  EXPECT_FALSE(is_run_config_text(model + "router = \"softmax_aux\"\n", "h36-m.toml"));
  try {
    plan::parse_model_toml(model + "router = \"softmax_aux\"\n", "h36-m.toml");
    ADD_FAILURE() << "a [model]-only file is read by the model-file reader";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[train]"), std::string::npos) << e.what();
  }
}

// End to end: `trillion plan --model configs/moe-tiny.toml --json` plans the engine's table and
// names the ignored keys; the text form lists them under Assumptions.
TEST(RunConfigPlan, PlanCommandNamesIgnoredKeys) {
  const std::string path = TRILLION_SOURCE_DIR "/configs/moe-tiny.toml";
  const auto r = testing::run_trillion(
      "plan --model " + path + " --cluster h100 --gpus 4 --json --top 1", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  const int64_t engine = build_parameter_table(load_run_config(path, {}).model).total_elements();
  EXPECT_EQ(j["model"]["parameters"].get<int64_t>(), engine);
  EXPECT_EQ(j["model"]["name"], "moe-tiny");
  EXPECT_EQ(j["batch_tokens"].get<double>(), 4 * 32);
  EXPECT_EQ(j["tokens"].get<double>(), 20 * 4 * 32);
  const auto ignored = j["run_config"]["ignored"].get<std::vector<std::string>>();
  EXPECT_TRUE(contains(ignored, "optim.lr"));
  EXPECT_TRUE(contains(ignored, "train.seed"));
  const auto at_default = j["run_config"]["at_default"].get<std::vector<std::string>>();
  EXPECT_EQ(at_default, (std::vector<std::string>{"model.dtype", "model.router"}));
  EXPECT_TRUE(contains(j["run_config"]["used"].get<std::vector<std::string>>(), "model.top_k"));
  EXPECT_TRUE(j["assumptions"].contains("ignored"));
}

}  // namespace
}  // namespace trillion::cli
