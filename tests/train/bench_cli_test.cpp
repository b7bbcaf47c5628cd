// The benchmark commands' JSON interfaces (fields other tools and checks rely on), run on tiny
// shapes: bench gemm, bench step (with measured == predicted activation bytes, also under launch
// with tp 2), bench attention (and its ring under launch with --cp 2).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>

#include "cli_util.h"

using namespace trillion::testing;

TEST(BenchCli, GemmJson) {
  const auto r = run_trillion("bench gemm --size 256 --reps 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_GT(j["gflops"].get<double>(), 0.0);
  EXPECT_GE(j["threads"].get<int>(), 1);
}

TEST(BenchCli, StepJsonHasThePromisedFields) {
  for (const char* policy : {"none", "selective", "full:2"}) {
    const auto r =
        run_trillion("bench step " + config_path("tiny.toml") +
                     " --steps 2 --gemm-size 256 --json --profile --set model.recompute=" + policy);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output);
    for (const char* key :
         {"tokens_per_s", "model_flops_per_token", "mfu", "hfu", "peak_gflops", "params", "memory",
          "peak_activation_bytes", "predicted_activation_bytes", "profile"}) {
      EXPECT_TRUE(j.contains(key)) << key;
    }
    for (const char* cat : {"parameters", "gradients", "optimizer", "activations", "workspace"}) {
      EXPECT_TRUE(j["memory"].contains(cat)) << cat;
    }
    EXPECT_EQ(j["params"].get<int64_t>(), 22688);
    EXPECT_EQ(j["peak_activation_bytes"], j["predicted_activation_bytes"]) << policy;
    EXPECT_GT(j["hfu"].get<double>(), j["mfu"].get<double>());
    EXPECT_GT(j["profile"]["gemm"]["calls_per_step"].get<int>(), 0);
  }
}

// The bf16 recipe's profile names the work done outside the backend's ops: the linear layers'
// oneDNN GEMMs with exactly their FLOPs (6 x the blocks' linear parameters x tokens: forward,
// dgrad, wgrad) and the operand roundings with exactly their bytes (6 per element: 4 read, 2
// written), so the profile no longer leaves the recipe's time in "other".
TEST(BenchCli, Bf16ProfileCountsTheRecipeGemmsAndRoundings) {
  const auto r = run_trillion("bench step " + config_path("tiny.toml") +
                              " --steps 2 --gemm-size 256 --json --profile --set "
                              "precision.recipe=bf16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  if (j["recipe_gemm"] != "bf16 GEMM (oneDNN)") GTEST_SKIP() << "no native bf16 here: emulated";
  // tiny.toml: d 32, 4 heads of 8 (2 kv heads), ffn 64, 2 layers, 4 x 32 tokens per step.
  const int64_t tokens = 4 * 32, d = 32, qkv = (4 + 2 + 2) * 8, ffn = 64, layers = 2;
  const int64_t linear_params = layers * (d * qkv + d * d + d * 2 * ffn + ffn * d);
  const auto& linear = j["profile"]["linear bf16 (oneDNN)"];
  EXPECT_EQ(linear["flops_per_step"].get<double>(), 6.0 * linear_params * tokens);
  EXPECT_EQ(linear["calls_per_step"].get<int>(), 3 * 4 * layers);
  EXPECT_GT(linear["fraction_of_bf16_gemm_peak"].get<double>(), 0.0);
  // Rounded per step: the inputs X (forward, and wgrad again) and output gradients dY (dgrad,
  // and wgrad again) of every linear layer; never the weights, which the GEMMs read from the
  // store's bf16 values (ParameterStore::bf16_weights).
  const int64_t inputs = tokens * layers * (d + d + d + ffn);
  const int64_t output_grads = tokens * layers * (qkv + d + 2 * ffn + d);
  const int64_t elements = 2 * inputs + 2 * output_grads;
  EXPECT_EQ(j["profile"]["bf16 rounding"]["bytes_per_step"].get<double>(), 6.0 * elements);
}

// Under launch on a tp 2 mesh: rank 0 alone prints, the time inside tp collectives is a part of
// the step, and the activation bytes are the tp/sp formula's.
TEST(BenchCli, StepUnderLaunchWithTensorParallelism) {
  for (const char* sp : {"true", "false"}) {
    const auto r = run_trillion("launch -n 2 -- bench step " + config_path("tiny.toml") +
                                    " --steps 2 --gemm-size 256 --json --set parallel.tp=2 --set "
                                    "parallel.sp=" +
                                    sp,
                                false);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output);  // one JSON object: rank 0's
    EXPECT_EQ(j["parallel"]["tp"], 2);
    EXPECT_EQ(j["parallel"]["sp"], std::string(sp) == "true");
    EXPECT_GT(j["tp_comm_fraction"].get<double>(), 0.0);
    EXPECT_LT(j["tp_comm_fraction"].get<double>(), 1.0);
    EXPECT_EQ(j["peak_activation_bytes"], j["predicted_activation_bytes"]) << sp;
    EXPECT_EQ(j["params"].get<int64_t>(), 22688);  // the whole model's count, not a shard's
  }
}

TEST(BenchCli, AttentionJsonAndLinearMemory) {
  auto bytes = [](const std::string& impl, int seq) {
    const auto r = run_trillion("bench attention --seq " + std::to_string(seq) +
                                " --heads 2 --head-dim 16 --reps 1 --json --impl " + impl);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output);
    EXPECT_GT(j["seconds_fwd_bwd"].get<double>(), 0.0);
    return j["peak_workspace_bytes"].get<double>();
  };
  EXPECT_LT(bytes("tiled", 2048) / bytes("tiled", 512), 4.5);
  EXPECT_GT(bytes("materialized", 2048) / bytes("materialized", 512), 15.0);
  EXPECT_EQ(run_trillion("bench attention --impl flash").exit_code, 2);
}

// bench attention --cp 2 under launch: the overlapped, serialized and ring-alone times (the
// slowest rank's, one repetition) are positive and finite, and so is the hidden fraction (their
// ratio, unclamped). The counted causal pairs of T = 256: zigzag gives both ranks 32896 / 2 =
// 16448, forward and backward (max/mean exactly 1); contiguous gives rank 0 its 128 x 129 / 2 =
// 8256 and rank 1 128 x 128 + 8256 = 24640 (max/mean 24640 / 16448).
TEST(BenchCli, RingAttentionUnderLaunchMeasuresOverlapAndBalance) {
  for (const std::string split : {"zigzag", "contiguous"}) {
    const auto r = run_trillion("launch -n 2 -- bench attention --cp 2 --split " + split +
                                    " --seq 256 --heads 2 --kv-heads 1 --head-dim 16 --reps 2 "
                                    "--json",
                                false);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output);
    EXPECT_EQ(j["cp"], 2);
    EXPECT_EQ(j["block_bytes"], 128 * 2 * 16 * 4);
    EXPECT_EQ(j["hops"], 4);  // 1 K/V forward, 1 K/V + 2 dK/dV backward
    for (const char* key : {"overlapped_s", "serialized_s", "ring_alone_s"}) {
      EXPECT_TRUE(std::isfinite(j[key].get<double>())) << key;
      EXPECT_GT(j[key].get<double>(), 0.0) << key;
    }
    const double hidden = j["hidden_fraction"].get<double>();
    EXPECT_TRUE(std::isfinite(hidden));
    EXPECT_DOUBLE_EQ(hidden, (j["serialized_s"].get<double>() - j["overlapped_s"].get<double>()) /
                                 j["ring_alone_s"].get<double>());
    ASSERT_EQ(j["ranks"].size(), 2u);
    for (const auto& rank : j["ranks"]) {
      EXPECT_LE(rank["overlapped_s"].get<double>(), j["overlapped_s"].get<double>());
      EXPECT_GT(rank["compute_s"].get<double>(), 0.0);
      EXPECT_GE(rank["ring_wait_s"].get<double>(), 0.0);
      EXPECT_EQ(rank["backward_visible_pairs"], rank["visible_pairs"]);
    }
    if (split == "zigzag") {
      EXPECT_EQ(j["pairs_max_over_mean"].get<double>(), 1.0);
      EXPECT_EQ(j["backward_pairs_max_over_mean"].get<double>(), 1.0);
      EXPECT_EQ(j["ranks"][0]["visible_pairs"].get<double>(), 16448.0);
    } else {
      EXPECT_DOUBLE_EQ(j["pairs_max_over_mean"].get<double>(), 24640.0 / 16448.0);
      EXPECT_DOUBLE_EQ(j["backward_pairs_max_over_mean"].get<double>(), 24640.0 / 16448.0);
      EXPECT_EQ(j["ranks"][0]["visible_pairs"].get<double>(), 8256.0);
      EXPECT_EQ(j["ranks"][1]["visible_pairs"].get<double>(), 24640.0);
    }
  }
}

// The ring benchmark's own flags are what its errors name: a --seq the split cannot cut, and a
// --split without --cp.
TEST(BenchCli, RingAttentionFlagErrorsNameTheFlags) {
  const auto seq = run_trillion("launch -n 2 -- bench attention --cp 2 --seq 66 --heads 2");
  EXPECT_NE(seq.exit_code, 0) << seq.output;
  EXPECT_TRUE(has(seq.output,
                  "bench attention --cp 2 --split zigzag cuts the sequence into 4 equal chunks, "
                  "but --seq 66 is not a multiple of 4; choose --seq 68"))
      << seq.output;
  const auto split = run_trillion("bench attention --split contiguous --seq 64");
  EXPECT_EQ(split.exit_code, 2) << split.output;
  EXPECT_TRUE(has(split.output,
                  "bench attention --split contiguous splits the sequence over "
                  "context-parallel ranks: give --cp N"))
      << split.output;
}

// The emulated block-scaled GEMMs: error against the fp32 product of the same inputs, in the
// order of their mantissa bits (E4M3 3, E5M2 2, E2M1 1), and a named refusal of other dtypes.
TEST(BenchCli, EmulatedLowPrecisionGemmReportsItsErrorVsFp32) {
  std::map<std::string, double> rms;
  for (const char* dtype : {"fp8", "fp8-e5m2", "mxfp4", "nvfp4"}) {
    const auto r =
        run_trillion(std::string("bench gemm --size 256 --reps 1 --json --dtype ") + dtype, false);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output);
    EXPECT_EQ(j["dtype"], dtype);
    EXPECT_GT(j["gflops"].get<double>(), 0);
    rms[dtype] = j["rms_rel_error"].get<double>();
  }
  EXPECT_LT(rms["fp8"], 0.05);
  EXPECT_LT(rms["fp8"], rms["fp8-e5m2"]);
  EXPECT_LT(rms["fp8-e5m2"], rms["nvfp4"]);
  EXPECT_LT(rms["nvfp4"], rms["mxfp4"]);
  const auto bad = run_trillion("bench gemm --dtype int3");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--dtype 'int3': expected fp32, bf16, fp8"), std::string::npos)
      << bad.output;
}

// bf16 through oneDNN where the CPU has native bf16 ("emulated" otherwise, and with
// TRILLION_ONEDNN=0). bf16 keeps 8 significant bits: rounding an operand to nearest has relative
// error at most u = 2^-8, a product of two rounded operands at most 2u (+u^2), and so does each
// output relative to the sum of its |products|. Over a random GEMM the RMS relative error is
// about 0.6u (uniform rounding errors: sqrt(2) * u / sqrt(3) * E[1/x^2]^(1/2) over a binade),
// far above fp32's 2^-24 and below u; oneDNN and the emulation differ only in the fp32
// accumulation order, so they report the same error to a few percent.
TEST(BenchCli, Bf16GemmErrorIsWithinTheBf16Bound) {
  auto run = [](bool allow_onednn) {
    if (!allow_onednn) setenv("TRILLION_ONEDNN", "0", 1);
    const auto r = run_trillion("bench gemm --size 256 --reps 1 --json --dtype bf16", false);
    unsetenv("TRILLION_ONEDNN");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output);
  };
  const auto native = run(true), emulated = run(false);
  EXPECT_EQ(emulated["path"], "emulated");
  const double u = std::ldexp(1.0, -8);
  for (const auto& j : {native, emulated}) {
    EXPECT_EQ(j["dtype"], "bf16");
    EXPECT_GT(j["gflops"].get<double>(), 0);
    const double rms = j["rms_rel_error"].get<double>();
    EXPECT_GT(rms, u / 4) << j["path"];
    EXPECT_LT(rms, u) << j["path"];
    EXPECT_LT(j["max_error_rel_to_max"].get<double>(), 2 * u) << j["path"];
  }
  EXPECT_NEAR(native["rms_rel_error"].get<double>(), emulated["rms_rel_error"].get<double>(),
              0.05 * emulated["rms_rel_error"].get<double>());
  std::printf("bf16 GEMM 256^3: path %s, RMS relative %.5f (emulated %.5f)\n",
              native["path"].get<std::string>().c_str(), native["rms_rel_error"].get<double>(),
              emulated["rms_rel_error"].get<double>());
}

// bench step with precision.recipe = fp8 reports the recipe and the error vs fp32 of the config's
// w_gate_up forward GEMM through it ([128, 32] x [128, 32]^T on tiny). E4M3 keeps 4 significant
// bits: the amax scale maps every tile's values into its normal range (x ~ N(0, 1) spans far
// less than E4M3's 2^15), so an operand's relative rounding error is at most u = 2^-4, and over a
// random GEMM the RMS relative error is about 0.6u, as bf16's is 0.6 x 2^-8 (see above): between
// u/4 and u, and the largest error below 2u of the largest output.
TEST(BenchCli, StepReportsTheFp8RecipeGemmErrorWithinE4m3Bounds) {
  const auto r = run_trillion("bench step " + config_path("tiny.toml") +
                                  " --steps 1 --gemm-size 256 --json --set precision.recipe=fp8",
                              false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["precision_recipe"], "fp8");
  ASSERT_TRUE(j.contains("recipe_gemm_rms_rel_error")) << j.dump();
  ASSERT_TRUE(j.contains("recipe_gemm_max_error_rel_to_max")) << j.dump();
  const double u = std::ldexp(1.0, -4);
  const double rms = j["recipe_gemm_rms_rel_error"], max = j["recipe_gemm_max_error_rel_to_max"];
  EXPECT_GT(rms, u / 4);
  EXPECT_LT(rms, u);
  EXPECT_GT(max, 0.0);
  EXPECT_LT(max, 2 * u);
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0.0);
  std::printf("fp8 recipe GEMM on tiny: RMS relative %.5f, max %.5f of the largest output\n", rms,
              max);
}

// MFU's denominator is the peak of the GEMMs a recipe runs, and no recipe can print an MFU above
// 100%: with every measured peak 10^6 times too low (a machine busy while it measured), the first
// step beats it, the peak is measured again and then raised to the step's own rate. Every
// metrics line, progress line, summary.json and `bench step --json` stays at or below 1. One
// recipe per kind of GEMM: fp32, bf16 (oneDNN or emulated), block-scaled (train: fp8; bench:
// nvfp4); MfuPeak.GemmMixSplitsTheModelFlopsByTheGemmThatRunsThem checks the rule itself.
TEST(Mfu, NoRecipePrintsMoreThanOneHundredPercent) {
  for (const char* recipe : {"fp32", "bf16", "fp8"}) {
    SCOPED_TRACE(recipe);
    const std::string dir = fresh_dir(std::string("mfu_") + recipe);
    const auto r = run_trillion("train " + config_path("tiny.toml") + " --run-dir " + dir +
                                " --set train.steps=3 --set train.log_every=1 --set train.eval_batches=1 --set "
                                "precision.recipe=" + recipe,
                                true, "TRILLION_PEAK_SLOWDOWN=1e6 ");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // Progress lines: "MFU 37.2% of 12 GFLOP/s fp32, raised".
    size_t at = 0, lines = 0;
    while ((at = r.output.find("MFU ", at)) != std::string::npos) {
      at += 4;
      const double percent = std::atof(r.output.c_str() + at);
      EXPECT_LE(percent, 100.0) << r.output;
      if (r.output.compare(at, 2, "co") != 0) ++lines;  // not "MFU counts"
    }
    EXPECT_EQ(lines, 3u) << r.output;
    EXPECT_NE(r.output.find(", raised"), std::string::npos) << r.output;
    std::ifstream metrics(dir + "/metrics.jsonl");
    std::string line;
    int steps = 0;
    while (std::getline(metrics, line)) {
      const double mfu = nlohmann::json::parse(line)["mfu"].get<double>();
      EXPECT_GT(mfu, 0.0);
      EXPECT_LE(mfu, 1.0);
      ++steps;
    }
    EXPECT_EQ(steps, 3);
    std::ifstream in(dir + "/summary.json");
    const auto summary = nlohmann::json::parse(in);
    EXPECT_LE(summary["mfu"].get<double>(), 1.0);
    const std::string peak = summary["mfu_peak"].get<std::string>();
    EXPECT_NE(peak.find("raised to the step's own rate"), std::string::npos) << peak;
    if (std::string(recipe) != "fp32") {  // the recipe's own GEMM is named beside fp32's
      EXPECT_NE(peak.find("of the FLOPs"), std::string::npos) << peak;
    }
  }
  const auto b = run_trillion("bench step " + config_path("tiny.toml") +
                                  " --steps 2 --gemm-size 128 --json --set precision.recipe=nvfp4",
                              false, "TRILLION_PEAK_SLOWDOWN=1e6 ");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const auto j = nlohmann::json::parse(b.output);
  EXPECT_LE(j["mfu"].get<double>(), 1.0);
  EXPECT_LE(j["mfu_best_step"].get<double>(), 1.0);
  EXPECT_LE(j["hfu"].get<double>(), 1.0);  // raised to the fastest step's hardware FLOP rate
  EXPECT_NE(j["peak"].get<std::string>().find("raised"), std::string::npos);
}
