// Training with a precision recipe (issue 14), through the real `trillion` binary: the
// [precision] section is validated with clear messages; the default is fp32 bit for bit; the
// per-category memory of each recipe is plan/'s bytes per parameter; configs/markov.toml trained
// with each recipe reaches the chain's entropy rate; on the bundled Brown corpus fp8's final
// validation loss is within 1% of bf16's (same config and tokens).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "cli_util.h"
#include "core/error.h"
#include "plan/hardware.h"
#include "plan/layout.h"
#include "plan/memory.h"
#include "precision/recipe.h"
#include "train/mfu_peak.h"
#include "train/run_config.h"

using namespace trillion;
using namespace trillion::testing;

namespace {

std::string error_of(const std::string& toml) {
  try {
    parse_run_config(toml, "run.toml", {});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The markov task with `recipe`, shortened to 200 steps (fp32 reaches 0.045 nats there).
void expect_markov_converges(const std::string& recipe) {
  const std::string dir = fresh_dir("markov_" + recipe);
  const auto r = run_trillion("train " + config_path("markov.toml") + " --run-dir " + dir +
                              " --quiet --set train.steps=200 --set precision.recipe=" + recipe);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto s = read_json(dir + "/summary.json");
  const double h = s["entropy_rate"], val = s["final_val_loss"];
  EXPECT_LT(val - h, 0.06) << recipe << ": val " << val << " entropy rate " << h;
  EXPECT_GT(val - h, -0.02) << recipe;
}

}  // namespace

TEST(PrecisionConfig, RecipesAreValidatedWithClearMessages) {
  const std::string model =
      "[model]\nvocab_size = 64\nd_model = 32\nn_layers = 1\nn_heads = 2\nffn_hidden = 64\nseq_len "
      "= 16\n";
  EXPECT_EQ(parse_run_config(model, "run.toml", {}).precision.recipe, "fp32");
  EXPECT_EQ(parse_run_config(model + "[precision]\nrecipe = \"nvfp4\"\n", "run.toml", {})
                .precision.recipe,
            "nvfp4");
  std::string e = error_of(model + "[precision]\nrecipe = \"fp6\"\n");
  EXPECT_TRUE(has(e,
                  "run.toml: precision.recipe: unknown precision recipe 'fp6' (recipes: fp32, "
                  "bf16, fp8, mxfp4, nvfp4)"))
      << e;
  e = error_of(model + "[precision]\nrecipes = \"fp8\"\n");
  EXPECT_TRUE(has(e, "unknown key 'precision.recipes'")) << e;
  e = error_of(model + "dtype = \"f64\"\n[precision]\nrecipe = \"bf16\"\n");
  EXPECT_TRUE(has(e, "model.dtype = 'f64'") && has(e, "use model.dtype = \"f32\"")) << e;
  // ZeRO-3 shards a dense model's master and bf16 copy (parallel/mixed_weights.h); MoE layers
  // keep the master whole in the model, which ZeRO-3 does not hold.
  EXPECT_EQ(error_of(model + "[parallel]\nzero = 3\n[precision]\nrecipe = \"fp8\"\n"), "");
  const std::string moe = model + "n_routed_experts = 4\ntop_k = 2\nexpert_ffn = 16\n";
  e = error_of(moe + "[parallel]\nzero = 3\n[precision]\nrecipe = \"fp8\"\n");
  EXPECT_TRUE(has(e, "with MoE layers keeps the fp32 master weights whole") &&
              has(e, "use parallel.zero <= 2, or recipe fp32"))
      << e;
  // precision.grad_dtype: fp32 (default) or bf16, the latter with a recipe's store and AdamW.
  EXPECT_EQ(parse_run_config(model, "run.toml", {}).precision.grad_dtype, "fp32");
  e = error_of(model + "[precision]\nrecipe = \"bf16\"\ngrad_dtype = \"fp16\"\n");
  EXPECT_TRUE(has(e, "run.toml: precision.grad_dtype = 'fp16': expected fp32 or bf16")) << e;
  e = error_of(model + "[precision]\ngrad_dtype = \"bf16\"\n");
  EXPECT_TRUE(has(e, "grad_dtype = 'bf16' is not supported with recipe fp32")) << e;
  e = error_of(model +
               "[optim]\nname = \"lamb\"\n[precision]\nrecipe = \"bf16\"\ngrad_dtype = "
               "\"bf16\"\n");
  EXPECT_TRUE(has(e, "optim.name = 'lamb' (use adamw)")) << e;
  e = error_of(model + "[guard]\nreplica_check_every = 5\n[precision]\nrecipe = \"bf16\"\n");
  EXPECT_TRUE(has(e, "set guard.replica_check_every = 0 or use recipe fp32")) << e;
  // The wgrad Hadamard transform: the recipe's own unless set; a power of two, block-scaled only.
  auto hadamard = [&](const std::string& precision) {
    return parse_run_config(model + "[precision]\n" + precision, "run.toml", {})
        .precision.wgrad_hadamard;
  };
  EXPECT_EQ(hadamard("recipe = \"nvfp4\"\n"), 16);
  EXPECT_EQ(hadamard("recipe = \"mxfp4\"\n"), 0);
  EXPECT_EQ(hadamard("recipe = \"nvfp4\"\nwgrad_hadamard = 0\n"), 0);
  EXPECT_EQ(hadamard("recipe = \"mxfp4\"\nwgrad_hadamard = 32\n"), 32);
  e = error_of(model + "[precision]\nrecipe = \"nvfp4\"\nwgrad_hadamard = 12\n");
  EXPECT_TRUE(has(e, "run.toml: precision.") && has(e, "size 12: expected a power of two")) << e;
  e = error_of(model + "[precision]\nrecipe = \"bf16\"\nwgrad_hadamard = 16\n");
  EXPECT_TRUE(has(e, "needs a block-scaled recipe") && has(e, "set it to 0")) << e;
  // Only a value other than the recipe's is written: --set precision.recipe on a resolved
  // config then gets the new recipe's transform.
  const std::string off = to_toml(
      parse_run_config(model + "[precision]\nrecipe = \"nvfp4\"\nwgrad_hadamard = 0\n", "r", {}));
  EXPECT_TRUE(has(off, "wgrad_hadamard = 0")) << off;
  EXPECT_EQ(parse_run_config(off, "r", {}).precision.wgrad_hadamard, 0);
  EXPECT_FALSE(has(to_toml(parse_run_config(model + "[precision]\nrecipe = \"nvfp4\"\n", "r", {})),
                   "wgrad_hadamard"));
  // precision.head: fp32 (default, not written) or bf16, the latter with a recipe only.
  EXPECT_EQ(parse_run_config(model, "run.toml", {}).precision.head, "fp32");
  e = error_of(model + "[precision]\nrecipe = \"bf16\"\nhead = \"fp16\"\n");
  EXPECT_TRUE(has(e, "run.toml: precision.head = 'fp16': expected fp32 or bf16")) << e;
  e = error_of(model + "[precision]\nhead = \"bf16\"\n");
  EXPECT_TRUE(has(e, "run.toml: precision.head = 'bf16' needs a precision recipe")) << e;
  const std::string head = to_toml(
      parse_run_config(model + "[precision]\nrecipe = \"fp8\"\nhead = \"bf16\"\n", "r", {}));
  EXPECT_TRUE(has(head, "head = 'bf16'")) << head;
  EXPECT_EQ(parse_run_config(head, "r", {}).precision.head, "bf16");
  EXPECT_FALSE(has(to_toml(parse_run_config(model, "r", {})), "head ="));
  // The resolved config names the recipe (what a run directory records and --resume reads).
  EXPECT_TRUE(has(to_toml(parse_run_config(model + "[precision]\nrecipe = \"fp8\"\n", "r", {})),
                  "[precision]\ngrad_dtype = 'fp32'\nrecipe = 'fp8'"));
}

// precision.bf16_blocks: absent, the recipe's rule for model.n_layers (written nowhere); set, it
// is validated against the recipe and the depth with one line naming the key, normalised, and
// written to the resolved config only when it differs from the rule.
TEST(PrecisionConfig, Bf16BlocksAreTheRecipesRuleOrTheKey) {
  const std::string model =
      "[model]\nvocab_size = 64\nd_model = 32\nn_layers = 4\nn_heads = 2\nffn_hidden = 64\nseq_len "
      "= 16\n";
  auto parsed = [&](const std::string& precision) {
    return parse_run_config(model + "[precision]\n" + precision, "run.toml", {});
  };
  EXPECT_EQ(parsed("recipe = \"nvfp4\"\n").precision.bf16_blocks, "");
  EXPECT_EQ(parsed("recipe = \"nvfp4\"\nbf16_blocks = \"last:2,first:1\"\n").precision.bf16_blocks,
            "first:1,last:2");
  EXPECT_EQ(parsed("recipe = \"fp8\"\nbf16_blocks = \"none\"\n").precision.bf16_blocks,
            "first:0,last:0");
  std::string e =
      error_of(model + "[precision]\nrecipe = \"nvfp4\"\nbf16_blocks = \"last:five\"\n");
  EXPECT_TRUE(has(e,
                  "run.toml: precision.bf16_blocks = \"last:five\": 'five' is not a whole "
                  "number; expected \"first:N,last:M\""))
      << e;
  EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 0) << e;
  e = error_of(model + "[precision]\nrecipe = \"mxfp4\"\nbf16_blocks = \"first:4,last:1\"\n");
  EXPECT_TRUE(has(e,
                  "run.toml: precision.bf16_blocks = \"first:4,last:1\" keeps 5 blocks in bf16, "
                  "but the model has 4 (model.n_layers)"))
      << e;
  e = error_of(model + "[precision]\nbf16_blocks = \"last:1\"\n");
  EXPECT_TRUE(has(e, "needs a block-scaled recipe") && has(e, "'fp32'")) << e;
  e = error_of(model + "[precision]\nrecipe = \"nvfp4\"\nbf16_blocks = 2\n");
  EXPECT_TRUE(has(e, "precision.bf16_blocks")) << e;
  // Written only when it differs from the rule (nvfp4 keeps the last of 4 blocks).
  const std::string same = to_toml(parsed("recipe = \"nvfp4\"\nbf16_blocks = \"last:1\"\n"));
  EXPECT_FALSE(has(same, "bf16_blocks")) << same;
  const std::string off = to_toml(parsed("recipe = \"nvfp4\"\nbf16_blocks = \"none\"\n"));
  EXPECT_TRUE(has(off, "bf16_blocks = 'first:0,last:0'")) << off;
  EXPECT_EQ(parse_run_config(off, "r", {}).precision.bf16_blocks, "first:0,last:0");
}

TEST(PrecisionRun, DefaultIsFp32BitForBitAndBf16ChangesTheNumbersSlightly) {
  const std::string base = fresh_dir("prec_default"), fp32 = fresh_dir("prec_fp32"),
                    bf16 = fresh_dir("prec_bf16");
  const std::string tiny = "train " + config_path("tiny.toml") + " --quiet --set train.steps=5";
  ASSERT_EQ(run_trillion(tiny + " --run-dir " + base).exit_code, 0);
  ASSERT_EQ(run_trillion(tiny + " --run-dir " + fp32 + " --set precision.recipe=fp32").exit_code,
            0);
  ASSERT_EQ(run_trillion(tiny + " --run-dir " + bf16 + " --set precision.recipe=bf16").exit_code,
            0);
  const auto same = run_trillion("compare " + base + " " + fp32 + " --tol 0");
  EXPECT_EQ(same.exit_code, 0) << same.output;
  EXPECT_TRUE(has(same.output, "bitwise equal")) << same.output;
  EXPECT_NE(run_trillion("compare " + base + " " + bf16 + " --tol 0").exit_code, 0);
  const double a = read_json(base + "/summary.json")["final_train_loss"];
  const double b = read_json(bf16 + "/summary.json")["final_train_loss"];
  EXPECT_NE(a, b);
  EXPECT_LT(std::fabs(a - b), 0.01 * a);
}

// precision.head = "bf16": the output head's GEMMs round their operands to bf16 (fp32
// accumulation), so the losses move off the fp32 head's by about bf16's rounding and no more:
// 5 steps of tiny.toml under the bf16 recipe, every logged loss within 1e-2 relative and the
// final one different.
TEST(PrecisionRun, Bf16HeadChangesTheLossesByABf16Rounding) {
  const std::string fp32_head = fresh_dir("prec_head_fp32"),
                    bf16_head = fresh_dir("prec_head_bf16");
  const std::string tiny = "train " + config_path("tiny.toml") +
                           " --quiet --set train.steps=5 --set precision.recipe=bf16";
  ASSERT_EQ(run_trillion(tiny + " --run-dir " + fp32_head).exit_code, 0);
  ASSERT_EQ(run_trillion(tiny + " --run-dir " + bf16_head + " --set precision.head=bf16").exit_code,
            0);
  const auto a = read_metrics(fp32_head), b = read_metrics(bf16_head);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (size_t i = 0; i < a.size(); ++i) {
    const double la = a[i]["loss"], lb = b[i]["loss"];
    EXPECT_LT(std::fabs(la - lb), 1e-2 * la) << "step " << i;
  }
  const double fa = read_json(fp32_head + "/summary.json")["final_train_loss"];
  const double fb = read_json(bf16_head + "/summary.json")["final_train_loss"];
  EXPECT_NE(fa, fb);
}

// parameters (the compute copy), gradients and optimizer (fp32 master + two moments) per
// parameter == plan/'s ZeRO-0 model states for the recipe's layout (bf16 weights, fp32 gradients
// and moments: 2 + 4 + 12 = 18 bytes), and the recipe's planner precision is one plan/ knows.
TEST(PrecisionMemory, BytesPerParameterArePlansForEachRecipe) {
  for (const std::string& name : precision::recipe_names()) {
    const std::string dir = fresh_dir("prec_mem_" + name);
    const auto r = run_trillion("train " + config_path("tiny.toml") + " --run-dir " + dir +
                                " --quiet --set train.steps=1 --set precision.recipe=" + name);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto s = read_json(dir + "/summary.json");
    const double params = s["params"];
    const auto& mem = s["memory"];
    const precision::Recipe& recipe = precision::recipe_named(name);
    if (name == "fp32") {  // the fp32 reference: 4-byte weights are the master, no copy
      EXPECT_EQ(mem["parameters"].get<double>(), 4 * params);
      EXPECT_EQ(mem["gradients"].get<double>(), 4 * params);
      EXPECT_EQ(mem["optimizer"].get<double>(), 8 * params);
      continue;
    }
    plan::Layout layout;
    layout.precision = plan::parse_precision(precision::planner_precision(recipe));
    layout.zero = 0;
    const plan::ModelStates states = plan::zero_model_states(
        params, layout.zero, 1, recipe.weight_bytes, layout.grad_bytes, layout.optimizer_bytes());
    EXPECT_EQ(mem["parameters"].get<double>(), states.parameters) << name;
    EXPECT_EQ(mem["gradients"].get<double>(), states.gradients) << name;
    EXPECT_EQ(mem["optimizer"].get<double>(), states.optimizer) << name;
    EXPECT_EQ(states.total(), 18 * params) << name;
  }
}

// precision.grad_dtype = "bf16": the ZeRO paper's 16 bytes per parameter at ZeRO 0 (2 bf16
// weights + 2 bf16 gradients + 12 fp32 master and moments), plan/'s layout with grad_bytes 2.
TEST(PrecisionMemory, Bf16GradientsAreSixteenBytesPerParameter) {
  const std::string dir = fresh_dir("prec_mem_bf16_grads");
  const auto r = run_trillion("train " + config_path("tiny.toml") + " --run-dir " + dir +
                              " --quiet --set train.steps=2 --set precision.recipe=bf16 --set "
                              "precision.grad_dtype=bf16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto s = read_json(dir + "/summary.json");
  const double params = s["params"];
  const auto& mem = s["memory"];
  plan::Layout layout;
  layout.precision = plan::parse_precision("bf16");
  layout.zero = 0;
  layout.grad_bytes = 2;
  const plan::ModelStates states =
      plan::zero_model_states(params, layout.zero, 1, precision::recipe_named("bf16").weight_bytes,
                              layout.grad_bytes, layout.optimizer_bytes());
  EXPECT_EQ(mem["parameters"].get<double>(), states.parameters);
  EXPECT_EQ(mem["gradients"].get<double>(), states.gradients);
  EXPECT_EQ(mem["optimizer"].get<double>(), states.optimizer);
  EXPECT_EQ(states.total(), 16 * params);
  const double loss = s["final_train_loss"];
  EXPECT_TRUE(std::isfinite(loss) && loss < 4.3) << loss;  // ln 64 = 4.16: it trains
}

TEST(MarkovConvergence, Bf16ReachesTheEntropyRate) {
  expect_markov_converges("bf16");
}
TEST(MarkovConvergence, Fp8ReachesTheEntropyRate) {
  expect_markov_converges("fp8");
}
TEST(MarkovConvergence, Mxfp4ReachesTheEntropyRate) {
  expect_markov_converges("mxfp4");
}
TEST(MarkovConvergence, Nvfp4ReachesTheEntropyRate) {
  expect_markov_converges("nvfp4");
}

// configs/brown-small.toml on the bundled Brown corpus (512-token BPE), the same config and tokens
// with bf16 and fp8: fp8's final validation loss within 1% relative of bf16's.
TEST(PrecisionLossGap, Fp8IsWithinOnePercentOfBf16OnTheBrownCorpus) {
  const std::string work = fresh_dir("prec_brown");
  std::filesystem::create_directories(work);
  const std::string corpus = std::string(TRILLION_SOURCE_DIR) + "/data/brown.txt.gz";
  ASSERT_EQ(
      run_trillion("tokenizer train --vocab 512 --out " + work + "/tok.json " + corpus).exit_code,
      0);
  ASSERT_EQ(run_trillion("data prepare --tokenizer " + work + "/tok.json --out " + work + "/data " +
                         corpus)
                .exit_code,
            0);
  double val[2] = {0, 0};
  const char* recipes[2] = {"bf16", "fp8"};
  for (int i = 0; i < 2; ++i) {
    const std::string dir = work + "/run_" + recipes[i];
    const auto r = run_trillion("train " + config_path("brown-small.toml") + " --run-dir " + dir +
                                " --quiet --set data.path=" + work +
                                "/data --set precision.recipe=" + recipes[i]);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    val[i] = read_json(dir + "/summary.json")["final_val_loss"];
  }
  EXPECT_LT(val[0], 6.0);  // it learned something (uniform over 512 tokens is 6.24 nats)
  EXPECT_LT(std::fabs(val[1] - val[0]) / val[0], 0.01) << "bf16 " << val[0] << " fp8 " << val[1];
}

// MFU's denominator (train/mfu_peak.h): a step's model FLOPs split by the GEMM that runs them.
// The blocks' linear layers (6 x their matrices per token) run the recipe's GEMM, or bf16 in
// blocks a low-precision recipe keeps in bf16; the head, router and attention scores run fp32.
TEST(MfuPeak, GemmMixSplitsTheModelFlopsByTheGemmThatRunsThem) {
  const RunConfig cfg = load_run_config(config_path("tiny.toml"), {});
  const plan::ModelSpec spec = cfg.model.spec();
  const double total =
      plan::model_flops_per_token(spec, cfg.model.seq_len, plan::AttentionFlops::kCausal);
  const plan::ModelCounts c = plan::count_model(spec);
  const double linear = 6.0 * spec.n_layers * (c.attention + c.dense_mlp);
  const GemmMix fp32 = gemm_mix(spec, cfg.model.seq_len, precision::recipe_named("fp32"), {});
  EXPECT_DOUBLE_EQ(fp32.fp32, total);
  EXPECT_EQ(fp32.recipe + fp32.bf16, 0.0);
  const GemmMix bf16 = gemm_mix(spec, cfg.model.seq_len, precision::recipe_named("bf16"), {});
  EXPECT_DOUBLE_EQ(bf16.recipe, linear);
  EXPECT_DOUBLE_EQ(bf16.fp32 + bf16.recipe, total);
  // nvfp4 keeping the first of the two blocks in bf16: half the linear FLOPs each way.
  const GemmMix nvfp4 = gemm_mix(spec, cfg.model.seq_len, precision::recipe_named("nvfp4"),
                                 precision::parse_bf16_blocks("first:1"));
  EXPECT_DOUBLE_EQ(nvfp4.bf16, linear / 2);
  EXPECT_DOUBLE_EQ(nvfp4.recipe, linear / 2);
  EXPECT_DOUBLE_EQ(nvfp4.total(), total);
  // A bf16 head (precision.head): the head's 6 V C per token join the bf16 recipe's GEMM, or
  // the bf16 GEMM beside a low-precision recipe.
  const double head = 6.0 * spec.vocab * spec.d_model;
  const GemmMix bf16_head =
      gemm_mix(spec, cfg.model.seq_len, precision::recipe_named("bf16"), {}, true);
  EXPECT_DOUBLE_EQ(bf16_head.recipe, linear + head);
  EXPECT_DOUBLE_EQ(bf16_head.fp32, total - linear - head);
  const GemmMix fp8_head =
      gemm_mix(spec, cfg.model.seq_len, precision::recipe_named("fp8"), {}, true);
  EXPECT_DOUBLE_EQ(fp8_head.recipe, linear);
  EXPECT_DOUBLE_EQ(fp8_head.bf16, head);

  // The blend: F / sum(F_k / P_k), and a step that beats it raises it (MFU never above 1).
  MfuPeak peak(nvfp4, precision::recipe_named("nvfp4"));
  peak.set_measured(100, 10, 300, /*step=*/0);
  const double blend = total / (nvfp4.fp32 / 100 + nvfp4.recipe / 10 + nvfp4.bf16 / 300);
  EXPECT_NEAR(peak.gflops(), blend, 1e-9 * blend);
  EXPECT_NEAR(peak.gflops(4), 4 * blend, 4e-9 * blend);
  EXPECT_NEAR(peak.mfu(blend / 2 * 4, 4, 1), 0.5, 1e-12);  // 4 processes at half the peak
  EXPECT_TRUE(peak.note().empty());
  EXPECT_DOUBLE_EQ(peak.mfu(1e6, 1, 2), 1.0);  // measured 2 steps ago, so not again: raised
  EXPECT_NE(peak.note().find("raised to the step's own rate at step 2"), std::string::npos);
  EXPECT_DOUBLE_EQ(peak.gflops(), 1e6);
  EXPECT_DOUBLE_EQ(peak.mfu_of_rate(5e5, 1), 0.5);
}
