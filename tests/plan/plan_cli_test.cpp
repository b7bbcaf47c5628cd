// `trillion plan` end to end: --json carries the documented fields, a --layout is evaluated
// (its free fields searched), a model TOML file plans like the catalog entry, --html writes a
// report with its charts, user errors exit 2 with one line, the Engine line names the engine
// recipe of the plan's precision, and hostile inputs (--seq 1, 2^31 GPUs, a model file past the
// engine's bounds) finish at once with a sane plan or a refusal naming the option or key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "../train/cli_util.h"
#include "plan/hardware.h"
#include "plan/published_runs.h"

namespace {

std::string run(const std::string& args, int* rc) {
  const auto r = trillion::testing::run_trillion(args, /*with_stderr=*/false);
  *rc = r.exit_code;
  return r.output;
}

TEST(PlanCli, LayoutJsonHasTheDocumentedFields) {
  int rc = 0;
  const auto j = nlohmann::json::parse(
      run("plan --model llama3-405b --cluster h100 --gpus 16384 --layout tp=8,cp=1,pp=16,dp=128 "
          "--seq 8192 --batch-tokens 16777216 --tokens 15.6T --json",
          &rc));
  ASSERT_EQ(rc, 0);
  for (const char* key :
       {"tp", "pp", "cp", "ep", "dp", "zero", "schedule", "chunks", "recompute", "micro_batch",
        "precision", "partition", "grad", "moments", "alloc", "act", "ema", "cp_comm", "p2p"})
    EXPECT_TRUE(j["layout"].contains(key)) << key;
  EXPECT_EQ(j["layout"]["alloc"], "slots");  // the engine's allocation unless told otherwise
  EXPECT_EQ(j["layout"]["tp"], 8);
  EXPECT_EQ(j["layout"]["pp"], 16);
  EXPECT_EQ(j["layout"]["dp"], 128);
  EXPECT_NEAR(j["mfu"].get<double>(), 0.41, 0.04);
  EXPECT_LT(j["memory_per_gpu_bytes"].get<double>(), 80e9);
  for (const char* key :
       {"step_seconds", "days", "gpu_hours", "cost_usd", "expected_interruptions", "goodput"})
    EXPECT_GT(j[key].get<double>(), 0) << key;
  EXPECT_NEAR(j["gpu_hours"].get<double>(), j["days"].get<double>() * 24 * 16384, 1.0);
  EXPECT_DOUBLE_EQ(j["tokens"].get<double>(), 15.6e12);
  EXPECT_FALSE(j["assumptions"].empty());
}

// --host-repair-hours and --elastic (issue 34's shrink case): Llama 3 405B on 16,384 H100 at tp 8
// pp 16 dp 128 with a host out for 4 hours per failure. Waiting for it never finishes (each
// failure loses more than the 3.1-hour cluster MTBF); elastic, the 127 replicas left run as 64
// (the largest count that splits the 2,048 micro-batches), at half the throughput until the host
// is back: repair x 0.5 + a restart = 2 h + 10 min per failure.
TEST(PlanCli, AHostOutForRepairIsWaitedForOrShrunkAround) {
  const std::string base =
      "plan --model llama3-405b --cluster h100 --gpus 16384 --layout tp=8,cp=1,pp=16,dp=128 "
      "--seq 8192 --batch-tokens 16777216 --tokens 15.6T --json";
  int rc = 0;
  const auto spare = nlohmann::json::parse(run(base, &rc));
  ASSERT_EQ(rc, 0);
  EXPECT_FALSE(spare.contains("host_repair"));
  const auto wait = nlohmann::json::parse(run(base + " --host-repair-hours 4", &rc));
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(wait["goodput"].get<double>(), 0);
  EXPECT_FALSE(wait["host_repair"]["elastic"].get<bool>());
  const auto shrink = nlohmann::json::parse(run(base + " --host-repair-hours 4 --elastic", &rc));
  ASSERT_EQ(rc, 0);
  EXPECT_TRUE(shrink["host_repair"]["elastic"].get<bool>());
  EXPECT_EQ(shrink["host_repair"]["elastic_dp"], 64);
  EXPECT_DOUBLE_EQ(shrink["host_repair"]["repair_cost_seconds"].get<double>(),
                   4 * 3600 * 0.5 + 600);
  EXPECT_DOUBLE_EQ(shrink["lost_per_failure_seconds"].get<double>() -
                       spare["lost_per_failure_seconds"].get<double>(),
                   4 * 3600 * 0.5 + 600);
  EXPECT_GT(shrink["goodput"].get<double>(), 0.1);
  EXPECT_LT(shrink["goodput"].get<double>(), spare["goodput"].get<double>());
  const auto r =
      trillion::testing::run_trillion("plan --model llama3-8b --cluster h100 --gpus 64 --elastic");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--elastic needs --host-repair-hours"), std::string::npos) << r.output;
}

// `--prefill TOKENS --json`: the time to first token as prefill_seconds, the layout the search
// chose, and memory by part; a fixed --layout field is kept.
TEST(PlanCli, PrefillJsonHasItsSecondsAndMemory) {
  int rc = 0;
  const auto j = nlohmann::json::parse(
      run("plan --model llama3-405b --cluster h100 --gpus 128 --prefill 1Mi --precision fp8 "
          "--layout cp_comm=allgather --json",
          &rc));
  ASSERT_EQ(rc, 0);
  EXPECT_GT(j["prefill_seconds"].get<double>(), 0);
  EXPECT_EQ(j["layout"]["cp_comm"], "allgather");
  EXPECT_EQ(
      j["layout"]["tp"].get<int>() * j["layout"]["cp"].get<int>() * j["layout"]["pp"].get<int>(),
      128);
  for (const char* key : {"weights", "kv_cache", "workspace", "overhead"})
    EXPECT_GT(j["memory"][key].get<double>(), 0) << key;
  EXPECT_LE(j["memory_per_gpu_bytes"].get<double>(), 80e9);
  run("plan --model llama3-405b --cluster h100 --gpus 7 --prefill 1Mi", &rc);
  EXPECT_NE(rc, 0);  // 1M tokens of 405B fit no layout of 7 GPUs (the error names the closest)
}

// Every --validate row prints the command that reproduces it; for a Table 1 row, Llama 3's
// all-gather CP row and MT-NLG's blocking-send row on 40 GB A100s, that command's plan is the
// row's plan (same step time to 1e-9).
TEST(PlanCli, ValidateRowsAreReproducedByTheirCommands) {
  using trillion::plan::PublishedRun;
  const std::vector<PublishedRun> runs = trillion::plan::published_runs();
  for (const PublishedRun& run : runs)
    EXPECT_NE(trillion::plan::reproduce_command(run).find("--layout"), std::string::npos);
  for (const std::string prefix :
       {"GPT 1.7B", "Llama 3 405B on 16384 H100, TP8 CP16", "MT-NLG 530B on 2240"}) {
    const auto it = std::find_if(runs.begin(), runs.end(), [&](const PublishedRun& r) {
      return r.name.rfind(prefix, 0) == 0;
    });
    ASSERT_NE(it, runs.end()) << prefix;
    const std::string command = trillion::plan::reproduce_command(*it);
    int rc = 0;
    const auto j = nlohmann::json::parse(
        run(command.substr(std::string("trillion ").size()) + " --json", &rc));
    ASSERT_EQ(rc, 0) << command;
    EXPECT_NEAR(
        j["step_seconds"].get<double>() / trillion::plan::check_run(*it).plan.best().step.step, 1.0,
        1e-9)
        << command;
  }
}

// `bench machine --out FILE` writes this machine as a cluster file the planner reads: one
// process (no MPI link measured, said so in the file), small probes.
TEST(PlanCli, BenchMachineWritesAClusterFileThePlannerReads) {
  const std::string file = testing::TempDir() + "h38-plan-machine.toml";
  int rc = 0;
  run("bench machine --out " + file + " --size 128 --copy-mb 8 --reps 1", &rc);
  ASSERT_EQ(rc, 0);
  const trillion::plan::Gpu g = trillion::plan::read_cluster_file(file);
  EXPECT_GT(g.bf16_flops, 0);
  EXPECT_GT(g.hbm_bandwidth, 0);
  EXPECT_NE(g.source_of("latency").find("not measured"), std::string::npos);
  const auto j = nlohmann::json::parse(run("plan --model " TRILLION_SOURCE_DIR
                                           "/configs/bench-d512.toml --cluster " +
                                               file + " --gpus 1 --top 1 --json",
                                           &rc));
  ASSERT_EQ(rc, 0);
  EXPECT_GT(j["step_seconds"].get<double>(), 0);
  std::remove(file.c_str());
}

TEST(PlanCli, ModelFileMatchesTheCatalog) {
  int rc = 0;
  const std::string common =
      " --cluster h100 --gpus 64 --layout tp=8,pp=1,cp=1,dp=8 --seq 8192 --json";
  const auto file = nlohmann::json::parse(
      run("plan --model " TRILLION_SOURCE_DIR "/configs/models/llama3-8b.toml" + common, &rc));
  ASSERT_EQ(rc, 0);
  const auto named = nlohmann::json::parse(run("plan --model llama3-8b" + common, &rc));
  EXPECT_EQ(file["model"]["parameters"], named["model"]["parameters"]);
  EXPECT_DOUBLE_EQ(file["step_seconds"].get<double>(), named["step_seconds"].get<double>());
  const auto moe = nlohmann::json::parse(
      run("plan --model " TRILLION_SOURCE_DIR "/configs/models/moe-2t.toml --cluster h100 "
          "--gpus 1024 --layout tp=8,pp=8,cp=1,dp=16,ep=16 --json",
          &rc));
  ASSERT_EQ(rc, 0);
  const auto moe_named = nlohmann::json::parse(
      run("plan --model moe-2t --cluster h100 --gpus 1024 --layout tp=8,pp=8,cp=1,dp=16,ep=16 "
          "--json",
          &rc));
  EXPECT_EQ(moe["model"]["parameters"], moe_named["model"]["parameters"]);
}

TEST(PlanCli, SearchesAndWritesHtml) {
  int rc = 0;
  const std::string html = testing::TempDir() + "/plan.html";
  const auto j = nlohmann::json::parse(run(
      "plan --model deepseek-v3 --cluster h800 --gpus 2048 --json --top 3 --html " + html, &rc));
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(j["ranked"].size(), 3u);
  EXPECT_LE(j["ranked"][0]["step_seconds"].get<double>(),
            j["ranked"][2]["step_seconds"].get<double>());
  EXPECT_GT(j["search"]["layouts"].get<long>(), 100);
  std::ifstream in(html);
  std::stringstream body;
  body << in.rdbuf();
  EXPECT_NE(body.str().find("Memory per GPU"), std::string::npos);
  EXPECT_NE(body.str().find("Runners-up"), std::string::npos);
  EXPECT_NE(body.str().find("<svg"), std::string::npos);
}

TEST(PlanCli, UserErrorsExitTwo) {
  int rc = 0;
  run("plan --model llama9 --cluster h100 --gpus 8", &rc);
  EXPECT_EQ(rc, 2);
  run("plan --model llama3-8b --cluster tpu --gpus 8", &rc);
  EXPECT_EQ(rc, 2);
  run("plan --model llama3-8b --cluster h100 --gpus 64 --layout tp=8,pp=2,cp=1,dp=8", &rc);
  EXPECT_EQ(rc, 2);  // 8*2*1*8 = 128 != 64
  run("plan --model llama3-405b --cluster h100 --gpus 8", &rc);
  EXPECT_EQ(rc, 2);  // does not fit
  run("plan --model llama3-8b --cluster h100 --gpus 64 --tokens lots", &rc);
  EXPECT_EQ(rc, 2);
  run("plan --model /nonexistent/model.toml --cluster h100 --gpus 64", &rc);
  EXPECT_EQ(rc, 2);
  run("plan --model llama3-8b --cluster h100 --gpus 64 --layout tp=3", &rc);
  EXPECT_EQ(rc, 2);  // tp must divide the heads
  run("plan --model llama3-8b --cluster h100 --gpus 64 --layout tp=8,pp=8,dp=1,cp=1,"
      "schedule=dualpipe --seq 8192 --batch-tokens 64Ki",
      &rc);
  EXPECT_EQ(rc, 2);  // 8 sequences: dualpipe needs >= 16 micro-batches
}

// A refusal says how much was needed, where, and against what; flags name what exists.
TEST(PlanCli, RefusalsExplainThemselves) {
  auto err = [](const std::string& args) {
    const auto r = trillion::testing::run_trillion(args, /*with_stderr=*/true);
    EXPECT_EQ(r.exit_code, 2) << args;
    return r.output;
  };
  const std::string fit = err("plan --model llama3-405b --cluster h100 --gpus 8");
  EXPECT_NE(fit.find("does not fit in 80.0 GB per GPU"), std::string::npos) << fit;
  EXPECT_NE(fit.find("The closest layout"), std::string::npos) << fit;
  EXPECT_NE(fit.find("activations"), std::string::npos) << fit;
  EXPECT_NE(fit.find("GB over"), std::string::npos) << fit;
  const std::string fp8 = err("plan --model llama3-8b --cluster a100 --gpus 64 --precision fp8");
  EXPECT_NE(fp8.find("no dense fp8 peak"), std::string::npos) << fp8;
  EXPECT_NE(fp8.find("bf16, fp16"), std::string::npos) << fp8;
  EXPECT_EQ(fp8.find("--layout fields"), std::string::npos) << fp8;
  const std::string chunks =
      err("plan --model llama3-8b --cluster h100 --gpus 64 --layout pp=4,schedule=interleaved "
          "--chunks 1");
  EXPECT_NE(chunks.find("--chunks"), std::string::npos) << chunks;
}

TEST(PlanCli, SmallModelHumanUnits) {
  int rc = 0;
  const std::string out =
      run("plan --model " TRILLION_SOURCE_DIR "/configs/brown.toml --cluster h100 --gpus 8", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("M parameters"), std::string::npos) << out;
  EXPECT_EQ(out.find("0B parameters"), std::string::npos) << out;
  EXPECT_EQ(out.find("e+"), std::string::npos) << out;  // no $3.45e+07 or 1.73e+07
}

// The Engine line (and --json's engine_recipe) names the engine's [precision] settings that
// train the plan's layout, or says why there are none (fp16, bf16 moments).
TEST(PlanCli, EngineLineNamesTheEngineRecipe) {
  int rc = 0;
  const std::string base = "plan --model llama3-8b --cluster b200 --gpus 64 ";
  std::string out = run(base + "--precision fp4", &rc);
  ASSERT_EQ(rc, 0) << out;
  const size_t layout = out.find("\nLayout    "), engine = out.find("\nEngine    ");
  EXPECT_TRUE(layout != std::string::npos && engine > layout) << out;
  EXPECT_NE(
      out.find("Engine    [precision] recipe = \"nvfp4\" (or \"mxfp4\"), grad_dtype = \"fp32\"\n"),
      std::string::npos)
      << out;
  out = run(base + "--layout precision=fp8,grad=bf16", &rc);
  EXPECT_NE(out.find("Engine    [precision] recipe = \"fp8\", grad_dtype = \"bf16\"\n"),
            std::string::npos)
      << out;
  out = run(base + "--precision fp16", &rc);
  EXPECT_NE(out.find("Engine    precision fp16 has no engine recipe"), std::string::npos) << out;
  out = run(base + "--layout moments=bf16", &rc);
  EXPECT_NE(out.find("Engine    moments=bf16 has no engine recipe (AdamW keeps fp32 moments, 12 "
                     "bytes/parameter of master and moments; the plan counts 8)"),
            std::string::npos)
      << out;
  const auto j = nlohmann::json::parse(run(base + "--precision bf16 --json", &rc));
  EXPECT_EQ(j["engine_recipe"]["recipe"], "bf16");
  EXPECT_EQ(j["engine_recipe"]["grad_dtype"], "fp32");
  const auto none = nlohmann::json::parse(run(base + "--precision fp16 --json", &rc));
  EXPECT_TRUE(none["engine_recipe"]["recipe"].is_null()) << none["engine_recipe"].dump();
}

TEST(PlanCli, CompareAndValidate) {
  int rc = 0;
  const std::string out = run("plan --compare llama3-405b-16k deepseek-v3-2k", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("GPU-hours llama3-405b-16k / deepseek-v3-2k"), std::string::npos) << out;
  EXPECT_NE(out.find("11.06x published"), std::string::npos) << out;
  const std::string table = run("plan --validate", &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_NE(table.find("Narayanan et al. 2104.04473 Table 1"), std::string::npos);
  EXPECT_NE(table.find("(calibration)"), std::string::npos);
}

TEST(PlanCli, HtmlHasAxesTimelineAndRunnersUpChart) {
  int rc = 0;
  const std::string html = testing::TempDir() + "/plan_axes.html";
  run("plan --model llama3-70b --cluster h100 --gpus 512 --layout tp=8,pp=4 --html " + html, &rc);
  ASSERT_EQ(rc, 0);
  std::ifstream in(html);
  std::stringstream body;
  body << in.rdbuf();
  const std::string s = body.str();
  EXPECT_NE(s.find("Timeline of one step"), std::string::npos);
  EXPECT_NE(s.find(">seconds</text>"), std::string::npos);
  EXPECT_NE(s.find("seconds per step"), std::string::npos);  // the runners-up chart's axis
  EXPECT_NE(s.find("width=\"100%\""), std::string::npos);    // page width
  EXPECT_EQ(s.find("e+0"), std::string::npos);
}

// Hardening II (issue 39). A shell `timeout 20` bounds each command that ran away before.
trillion::testing::CommandResult run_bounded(const std::string& args) {
  return trillion::testing::run_shell("timeout 20 " + std::string(TRILLION_BINARY) + " " + args +
                                      " 2>&1");
}

std::string write_model(const std::string& name, const std::string& extra) {
  const std::string path = trillion::testing::fresh_dir("model") + "_" + name + ".toml";
  std::ofstream(path) << "[model]\nvocab_size = 32000\nd_model = 256\nn_heads = 8\n"
                         "ffn_hidden = 512\n"
                      << extra;
  return path;
}

// Item 9: --seq 1 makes 16Mi sequences, 65,536+ micro-batches per pipeline; every schedule
// simulation grew with them (60 s and 1.7 GB, still growing). Schedules are now played with at
// most a steady state's micro-batches and extrapolated.
TEST(PlanCli, SeqOneIsPlannedInSeconds) {
  const auto r = run_bounded("plan --model llama3-8b --cluster h100 --gpus 64 --seq 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output.substr(0, 2000);
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["seq_len"], 1);
  EXPECT_EQ(j["batch_tokens"].get<double>(), 16777216.0);
  const auto& l = j["layout"];
  EXPECT_EQ(l["tp"].get<int>() * l["pp"].get<int>() * l["cp"].get<int>() * l["dp"].get<int>(), 64);
  EXPECT_GE(j["step"]["microbatches"].get<long>(), 65536 / 4);
  EXPECT_GT(j["step_seconds"].get<double>(), 0);
  EXPECT_LT(j["step_seconds"].get<double>(), 1e5);
}

// Item 9: a model file past the engine's bounds (n_layers 100000: train refuses > 2^14) is
// refused as train refuses it, naming the file and the key; one with seq_len = 1 plans at once.
TEST(PlanCli, ModelFileOutsideTheEngineBoundsIsRefused) {
  const std::string deep = write_model("deep", "n_layers = 100000\nseq_len = 256\n");
  auto r = run_bounded("plan --model " + deep + " --cluster h100 --gpus 64");
  EXPECT_EQ(r.exit_code, 2) << r.output.substr(0, 2000);
  EXPECT_NE(r.output.find(deep + ": model.n_layers = 100000 exceeds 2^14"), std::string::npos)
      << r.output.substr(0, 2000);
  const std::string short_seq = write_model("seq1", "n_layers = 4\nseq_len = 1\n");
  r = run_bounded("plan --model " + short_seq + " --cluster h100 --gpus 64 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output.substr(0, 2000);
  EXPECT_EQ(nlohmann::json::parse(r.output)["seq_len"], 1);
}

// Item 15: --gpus 0 printed a range up to DBL_MAX (309 digits).
TEST(PlanCli, GpusRangeIsHuman) {
  const auto r = run_bounded("plan --model llama3-8b --cluster h100 --gpus 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--gpus: Value 0 not in range 1 to 16777216"), std::string::npos)
      << r.output;
  EXPECT_LT(r.output.size(), 200u) << r.output;
}

// Item 15: --gpus 2147483648 wrapped to dp=-2147483648; --gpus is bounded at 2^24, and the
// bound itself plans without overflow.
TEST(PlanCli, GpusAreBoundedWithoutOverflow) {
  auto r = run_bounded("plan --model llama3-8b --cluster h100 --gpus 2147483648");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--gpus: Value 2147483648 not in range 1 to 16777216"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("dp=-"), std::string::npos) << r.output;
  r = run_bounded(
      "plan --model llama3-8b --cluster h100 --gpus 16777216 --seq 1 --layout tp=8,pp=4 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output.substr(0, 2000);
  const auto j = nlohmann::json::parse(r.output);
  const auto& l = j["layout"];
  EXPECT_EQ(l["dp"].get<long>(), 524288);
  EXPECT_EQ(l["tp"].get<long>() * l["pp"].get<long>() * l["cp"].get<long>() * l["dp"].get<long>(),
            16777216L);
}

// Item 15: a model file's batch_tokens = 1 was blamed on a --batch-tokens never passed.
TEST(PlanCli, ModelFileBatchTokensAreBlamedOnTheFile) {
  const std::string path = write_model("batch", "n_layers = 4\nseq_len = 256\nbatch_tokens = 1\n");
  const auto r = run_bounded("plan --model " + path + " --cluster h100 --gpus 8");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find(path + ": model.batch_tokens = 1 is not a whole number of "
                                 "model.seq_len = 256-token sequences"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("--batch-tokens"), std::string::npos) << r.output;
}

}  // namespace
