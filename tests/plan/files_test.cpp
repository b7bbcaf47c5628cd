// Model, cluster and plan files: the catalog entries are the shipped TOML files; every block
// kind parses into the parameter count its formula says (Narayanan et al. eq. (2) for the GPT
// block); errors name the file, key and fix; and the search never ranks an impossible layout and
// says why it refused each one.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/error.h"
#include "plan/catalog_files.h"
#include "plan/hardware.h"
#include "plan/model_file.h"
#include "plan/plan_file.h"
#include "plan/published_runs.h"
#include "plan/search.h"
#include "plan/units.h"

namespace trillion::plan {
namespace {

std::string error_of(const std::string& text) {
  try {
    parse_model_toml(text, "m.toml");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const char* kBase =
    "[model]\nvocab_size = 1000\nd_model = 64\nn_layers = 2\nn_heads = 4\nseq_len = 128\n";

TEST(ModelFiles, KindsParseAndErrorsNameTheKey) {
  const ModelSpec gpt = parse_model_toml(
      std::string(kBase) +
          "ffn_hidden = 256\nmlp = \"gelu\"\nnorm = \"layernorm\"\nattention = \"mha\"\n"
          "attention_kernel = \"materialised\"\nposition = \"learned\"\nlinear_biases = true\n"
          "dropout = 0.1\ntied_embeddings = true\n",
      "gpt.toml");
  EXPECT_EQ(gpt.name, "gpt");
  EXPECT_EQ(gpt.mlp, MlpKind::kGelu);
  EXPECT_EQ(gpt.norm, NormKind::kLayerNorm);
  EXPECT_EQ(gpt.attention_kind(), "mha");
  EXPECT_EQ(gpt.attention_kernel, AttentionKernel::kMaterialised);
  EXPECT_EQ(gpt.position, PositionKind::kLearned);
  // 12 l h^2 + 13 l h + (V + s) h, plus the final LayerNorm's 2h (eq. (2) leaves it out).
  const double h = 64, l = 2, V = 1000, s = 128;
  EXPECT_EQ(count_model(gpt).total, 12 * l * h * h + 13 * l * h + (V + s) * h + 2 * h);
  // ffn_hidden = 4h without an mlp: refused, saying what to write.
  EXPECT_NE(error_of(std::string(kBase) + "ffn_hidden = 256\n").find("mlp = \"gelu\""),
            std::string::npos);
  EXPECT_NE(error_of(std::string(kBase) + "ffn_hidden = 200\nmlpp = \"gelu\"\n").find("model.mlpp"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(kBase) + "ffn_hidden = 200\nn_kv_heads = 2\nattention = \"mha\"\n")
                .find("use attention = \"gqa\""),
            std::string::npos);
  EXPECT_NE(
      error_of(std::string(kBase) + "ffn_hidden = 200\nattention = \"mla\"\n").find("kv_lora_rank"),
      std::string::npos);
  EXPECT_NE(
      error_of(std::string(kBase) + "ffn_hidden = 200\nnorm = \"batchnorm\"\n").find("rmsnorm"),
      std::string::npos);
  // Group-limited routing: n_group / topk_group read and checked as the engine checks them.
  const std::string moe =
      std::string(kBase) + "n_routed_experts = 8\ntop_k = 2\nexpert_ffn = 16\nn_dense_layers = 0\n";
  const ModelSpec grouped = parse_model_toml(moe + "n_group = 4\ntopk_group = 2\n", "g.toml");
  EXPECT_EQ(grouped.n_group, 4);
  EXPECT_EQ(grouped.topk_group, 2);
  EXPECT_EQ(parse_model_toml(moe + "n_group = 4\n", "g.toml").topk_group, 4);  // default n_group
  EXPECT_EQ(error_of(moe + "n_group = 3\n"),
            "m.toml: model.n_group = 3 must be >= 1 and divide model.n_routed_experts = 8 (the "
            "experts are n_group contiguous groups of equal size)");
  EXPECT_NE(error_of(moe + "n_group = 4\ntopk_group = 0\n").find("model.topk_group = 0"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(kBase) + "ffn_hidden = 200\nn_group = 2\n")
                .find("MoE keys need n_routed_experts > 0"),
            std::string::npos);
  EXPECT_EQ(find_model("deepseek-v3").n_group, 8);
  EXPECT_EQ(find_model("deepseek-v3").topk_group, 4);
  // An engine run config plans as it trains (other tables ignored, engine-only keys accepted).
  const ModelSpec brown = read_model_file(TRILLION_SOURCE_DIR "/configs/brown.toml");
  EXPECT_EQ(brown.d_model, 384);
  EXPECT_EQ(brown.mlp, MlpKind::kSwiGlu);
}

// Narayanan et al.'s Table 1 sizes follow from eq. (2) with our parameter table.
TEST(ModelFiles, NarayananTable1SizesFromTheParameterTable) {
  struct Size {
    int64_t h, a, l;
    double billions;
  };
  for (const Size& s :
       {Size{2304, 24, 24, 1.7}, Size{6144, 48, 40, 18.4}, Size{12288, 96, 80, 145.6},
        Size{20480, 128, 105, 529.6}, Size{25600, 160, 128, 1008.0}}) {
    const ModelSpec m = megatron_gpt("gpt", s.h, s.a, s.l);
    EXPECT_NEAR(count_model(m).total / 1e9, s.billions, 0.05 * s.billions + 0.05) << s.h;
  }
}

// The published runs' models are catalog files (so --validate's commands name them); each
// Megatron GPT file is megatron_gpt's model, name and source aside.
TEST(ModelFiles, PublishedRunModelsAreCatalogFiles) {
  struct Gpt {
    const char* name;
    int64_t h, a, l;
  };
  for (const Gpt& g :
       {Gpt{"megatron-gpt-1.7b", 2304, 24, 24}, Gpt{"megatron-gpt-175b", 12288, 96, 96},
        Gpt{"megatron-gpt-530b", 20480, 128, 105}, Gpt{"megatron-gpt-1008b", 25600, 160, 128}}) {
    ModelSpec file = find_model(g.name), built = megatron_gpt(g.name, g.h, g.a, g.l);
    file.source = built.source;
    EXPECT_EQ(file, built) << g.name;
  }
  EXPECT_EQ(find_model("mt-nlg-530b").vocab, 50272);
  EXPECT_EQ(find_model("bloom-176b").vocab, 250680);
  EXPECT_DOUBLE_EQ(find_gpu("a100-40gb").hbm_bytes, 40e9);
}

TEST(ClusterFiles, CatalogIsTheShippedFiles) {
  int clusters = 0, models = 0, plans = 0;
  for (const CatalogFile& f : catalog_files()) {
    clusters += f.path.starts_with("clusters/");
    models += f.path.starts_with("models/");
    plans += f.path.starts_with("plans/");
  }
  EXPECT_EQ(static_cast<size_t>(clusters), gpu_catalog().size());
  EXPECT_EQ(static_cast<size_t>(models), model_catalog().size());
  EXPECT_GE(plans, 4);
  const Gpu& a100 = find_gpu("a100");
  EXPECT_DOUBLE_EQ(a100.fp16_flops, 312e12);
  EXPECT_DOUBLE_EQ(a100.fp8_flops, 0);
  EXPECT_EQ(a100.precisions(), "bf16, fp16");
  EXPECT_EQ(find_gpu("gb200-nvl72").nvlink_domain, 72);
  EXPECT_FALSE(find_gpu("h100").source_of("failures").empty());
  EXPECT_FALSE(find_gpu("a100").source_of("gemm").empty());
  // A user's cluster: custom HBM, peak and links.
  const Gpu custom = parse_cluster_toml(
      "[gpu]\nmodel = \"X\"\ngeneration = \"hopper\"\nsm_count = 100\nhbm_gb = 96\n"
      "hbm_tb_per_s = 4\n[peak_tflops]\nbf16 = 800\n[efficiency]\ngemm = 0.7\nattention = 0.5\n"
      "memory = 0.8\ncollective = 0.8\n[network]\nnvlink_domain = 16\nnvlink_gb_per_s = 1000\n"
      "nvlink_latency_us = 2\nscaleout_gb_per_s = 100\nscaleout_latency_us = 5\n[cost]\n"
      "usd_per_gpu_hour = 3\nfailures_per_1000_gpu_days = 1\nprice_source = \"quote\"\n",
      "clusters/x.toml");
  EXPECT_EQ(custom.name, "x");
  EXPECT_DOUBLE_EQ(custom.hbm_bytes, 96e9);
  EXPECT_EQ(custom.nvlink_domain, 16);
  EXPECT_EQ(custom.source_of("price"), "quote");
  EXPECT_THROW(parse_cluster_toml("[gpu]\nmodel = \"X\"\n", "y.toml"), Error);
  try {
    parse_cluster_toml(
        "[gpu]\nmodel=\"X\"\ngeneration=\"h\"\nsm_count=1\nhbm_gb=1\nhbm_tb_per_s=1\nhbm=3\n",
        "z.toml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gpu.hbm"), std::string::npos) << e.what();
  }
}

TEST(PlanFiles, PublishedComparisonsParse) {
  const PlanFile llama = resolve_plan("llama3-405b-16k");
  EXPECT_EQ(llama.inputs.gpus, 16384);
  EXPECT_TRUE(llama.inputs.search.fields.tp);
  EXPECT_DOUBLE_EQ(llama.published_gpu_hours, 30.84e6);
  const PlanFile ds = resolve_plan("deepseek-v3-2k");
  EXPECT_EQ(ds.inputs.search.fixed.schedule, schedule::ScheduleKind::kDualPipe);
  EXPECT_EQ(ds.inputs.search.fixed.moment_bytes, 2);
  EXPECT_THROW(resolve_plan("nope"), Error);
}

TEST(Units, HumanUnits) {
  EXPECT_EQ(format_count(12.6e6), "12.6M");
  EXPECT_EQ(format_count(17.3e6), "17.3M");
  EXPECT_EQ(format_count(405.9e9), "406B");
  EXPECT_EQ(format_count(950), "950");
  EXPECT_EQ(format_usd(34.5e6), "$34.5M");
  EXPECT_EQ(format_count(0.0409), "0.041");  // a small run's GPU-hours are not "0"
  EXPECT_EQ(format_count(12.34), "12.3");
  EXPECT_EQ(format_count(512), "512");
  EXPECT_EQ(format_bytes(77.1e9), "77.1 GB");
  EXPECT_EQ(format_seconds(43.9 * 86400), "43.9 days");
  EXPECT_EQ(format_seconds(5.45), "5.45 s");
  EXPECT_EQ(format_flops(3.94e25), "3.94e25");
}

// The search space: every depth dividing L, L + 1 or L + 2 (PP35 for 105 layers, PP16 for 126).
TEST(Search, PipelineDepthsIncludeUnevenAndPublishedOnes) {
  const auto d105 = pipeline_depths(105, 128);
  EXPECT_NE(std::find(d105.begin(), d105.end(), 35), d105.end());
  const auto d126 = pipeline_depths(126, 128);
  EXPECT_NE(std::find(d126.begin(), d126.end(), 16), d126.end());
  EXPECT_NE(std::find(d126.begin(), d126.end(), 63), d126.end());
  EXPECT_EQ(std::find(d126.begin(), d126.end(), 5), d126.end());
}

// Nothing ranked is impossible, and every refused layout is counted under a reason.
TEST(Search, RankedLayoutsArePossibleAndRefusalsAreAccounted) {
  struct Case {
    const char* model;
    const char* cluster;
    long gpus;
  };
  for (const Case& c : {Case{"llama3-70b", "h100", 512}, Case{"deepseek-v3", "h800", 2048},
                        Case{"llama3-405b", "h100", 8192}}) {
    const ModelSpec& m = find_model(c.model);
    const Gpu& gpu = find_gpu(c.cluster);
    SearchOptions o;
    o.keep = 20;
    const int64_t seq = m.default_seq;
    const SearchResult r = search_layouts(m, gpu, c.gpus, seq, m.default_batch_tokens, o);
    long refused = 0;
    for (const Refusal& rf : r.refusals) {
      refused += rf.count;
      EXPECT_FALSE(rf.example.empty());
    }
    EXPECT_EQ(r.fitting + refused, r.shapes) << c.model;
    for (const Candidate& cand : r.ranked) {
      const Layout& l = cand.layout;
      EXPECT_EQ(l.gpus(), c.gpus);
      EXPECT_EQ(m.n_heads % l.tp, 0);
      EXPECT_LE(l.tp, gpu.nvlink_domain);
      const PipelineShape shape = pipeline_shape(m, l);
      // Every stage holds a whole layer, except that a balanced or a fitted split may give the
      // embedding (first stage) or the head (last stage) a stage alone.
      const size_t n = shape.stage_layers.size();
      for (size_t st = 0; st < n; ++st) {
        const bool end = n > 1 && (st == 0 || st == n - 1);
        EXPECT_GE(shape.stage_layers[st], end && l.partition != Partition::kEven ? 0 : 1);
      }
      int64_t layers = 0;
      for (int k : shape.stage_layers) layers += k;
      EXPECT_EQ(layers, m.n_layers);
      if (l.schedule == schedule::ScheduleKind::kInterleaved && l.pp > 1) {
        EXPECT_LE(l.chunks * l.pp, max_pipeline_stages(m, l.partition));
        EXPECT_LE(l.chunks, (m.n_layers + 2) / l.pp);  // chunks <= units per rank
        EXPECT_EQ(cand.step.microbatches % l.pp, 0);
      }
      EXPECT_LE(cand.step.memory.total(), gpu.hbm_bytes);
      EXPECT_EQ((static_cast<long>(l.dp) * l.cp) % l.ep, 0);
    }
  }
}

// Small models plan on any GPU count, with seq < 2048 and human units.
TEST(Search, SmallModelsPlanOnAnyGpuCount) {
  PlanInputs in;
  in.model = read_model_file(TRILLION_SOURCE_DIR "/configs/brown.toml");
  in.gpu = find_gpu("h100");
  in.tokens = 1e9;
  for (long gpus : {1L, 3L, 7L, 8L, 12L}) {
    in.gpus = gpus;
    const Plan p = make_plan(in);
    EXPECT_EQ(p.best().layout.gpus(), gpus);
    EXPECT_GT(p.run.days, 0);
  }
}

}  // namespace
}  // namespace trillion::plan
