// Whole runs under `trillion launch` (mpirun) against the one-process run of the same config —
// "same math, any layout" (DESIGN.md principle 1): dp in {2, 4} x ZeRO stage in {0, 1, 2, 3} x
// {AdamW, LAMB}, 4 steps of configs/tiny.toml with small buckets (several per step):
// - per-step losses within 1e-5 relative and final weights within 1e-5 (`trillion compare`);
// - every rank's parameter, gradient and optimizer bytes equal plan::zero_model_states with fp32
//   byte sizes (4, 4, 8) exactly;
// - bytes each step sends (metrics comm_bytes, rank 0) within 1% of 2 P (n-1)/n * 4 (stages 0-2)
//   or 3 P (n-1)/n * 4 (stage 3).
// Also: accumulation and padded shards, the interface exactly as documented, resume across a
// ZeRO-3 run, and launch errors.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "../train/cli_util.h"
#include "plan/memory.h"

namespace trillion {
namespace {

using testing::config_path;
using testing::fresh_dir;
using testing::read_json;
using testing::run_trillion;
using testing::shared_run;
using testing::one_thread_per_rank;
using testing::read_metrics;

constexpr int64_t kParams = 22688;    // configs/tiny.toml
constexpr int64_t kEmbedding = 2048;  // its 64 x 32 embedding (the lm_head when untied)
constexpr int64_t kHeadNorm = 32;     // the final norm
// Child processes (trillion, mpirun and the ranks) inherit this: one OpenMP thread per rank,
// since ranks already outnumber the 2 cores.
const std::string kEnv = one_thread_per_rank();

std::string train_flags(const std::string& optimizer) {
  return "train " + config_path("tiny.toml") +
         " --quiet --set train.steps=4 --set parallel.bucket_mb=0.02 --set optim.name=" + optimizer;
}
std::string train_args(const std::string& dir, const std::string& optimizer) {
  return train_flags(optimizer) + " --run-dir " + dir;
}

// One layout of the parity grid. `extra` is added to the parallel run only: split backward
// passes and in-memory pipeline chunks must give the fused one-process run.
struct Layout {
  int dp, zero;
  std::string optimizer;
  std::string extra;
  bool tied = false;
  std::string name;
};

void PrintTo(const Layout& l, std::ostream* os) {
  *os << l.name;
}

class Parity : public ::testing::TestWithParam<Layout> {};

TEST_P(Parity, SameRunSameMemoryFormulaSameBytes) {
  const Layout l = GetParam();
  const std::string model = l.tied ? " --set model.tied_embeddings=true" : "";
  const std::string ref = shared_run(kEnv + train_flags(l.optimizer) + model);
  const std::string run = fresh_dir("parity_" + l.name);
  const auto r = run_trillion(kEnv + "launch -n " + std::to_string(l.dp) + " -- " +
                              train_args(run, l.optimizer) + model + l.extra +
                              " --set parallel.dp=" + std::to_string(l.dp) +
                              " --set parallel.zero=" + std::to_string(l.zero));
  ASSERT_EQ(r.exit_code, 0) << r.output;

  const auto cmp = run_trillion("compare " + ref + " " + run + " --tol 1e-5");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
  const auto ma = read_metrics(ref), mb = read_metrics(run);
  ASSERT_EQ(ma.size(), 4u);
  ASSERT_EQ(mb.size(), 4u);
  const double n = l.dp;
  const int64_t P = l.tied ? kParams - kEmbedding : kParams;
  // ZeRO-3 gathers every unit a pass reads: all of them in forward and in a fused backward, plus
  // the tied embedding once more for the head. Split backward passes: B reads all but the
  // embedding (the head borrows it when tied), W only the head (its logits are recomputed).
  const bool split = l.extra.find("split_backward=true") != std::string::npos;
  const int64_t tied = l.tied ? kEmbedding : 0, head = kHeadNorm + (l.tied ? 0 : kEmbedding);
  const int64_t backward = split ? (P - kEmbedding + tied) + (head + tied) : P + tied;
  const int64_t gathered = l.zero == 3 ? (P + tied) + backward : P;
  const double theory = static_cast<double>(P + gathered) * (n - 1) / n * 4;
  for (size_t s = 0; s < ma.size(); ++s) {
    const double a = ma[s]["loss"], b = mb[s]["loss"];
    EXPECT_LE(std::abs(a - b), 1e-5 * std::abs(a)) << "step " << s + 1;
    const double sent = mb[s]["comm_bytes"].get<double>();
    EXPECT_NEAR(sent / theory, 1.0, 0.01) << "step " << s + 1 << ": " << sent << " vs " << theory;
    EXPECT_EQ(ma[s]["comm_bytes"].get<double>(), 0.0);  // one process sends nothing
    // Per kind, exactly: each reduce-scatter or all-gather pass over the model is P (n-1)/n.
    const double pass = P * (n - 1) / n * 4;
    const auto& dp = mb[s]["comm"]["dp"];
    if (l.zero == 0) {
      EXPECT_NEAR(dp["all_reduce"].get<double>(), 2 * pass, 64);  // + the loss all-reduce
      EXPECT_FALSE(dp.contains("reduce_scatter"));
    } else {
      EXPECT_EQ(dp["reduce_scatter"].get<double>(), pass);
      EXPECT_EQ(dp["all_gather"].get<double>(), gathered * (n - 1) / n * 4);
    }
  }

  const auto summary = read_json(run + "/summary.json");
  EXPECT_EQ(summary["world_size"], l.dp);
  const plan::ModelStates f =
      plan::zero_model_states(static_cast<double>(P), l.zero, l.dp, 4, 4, 8);
  ASSERT_EQ(summary["memory_per_rank"].size(), static_cast<size_t>(l.dp));
  for (const auto& rank : summary["memory_per_rank"]) {
    EXPECT_EQ(rank["current"]["parameters"].get<double>(), f.parameters) << rank;
    EXPECT_EQ(rank["current"]["gradients"].get<double>(), f.gradients) << rank;
    EXPECT_EQ(rank["current"]["optimizer"].get<double>(), f.optimizer) << rank;
  }
}

std::vector<Layout> layouts() {
  std::vector<Layout> all;
  for (const char* opt : {"adamw", "lamb"}) {
    for (int dp : {2, 4}) {
      for (int zero = 0; zero <= 3; ++zero) {
        all.push_back(
            {dp, zero, opt, "", false,
             std::string(opt) + "_dp" + std::to_string(dp) + "_zero" + std::to_string(zero)});
      }
    }
  }
  // Split backward (all B passes, then all W passes), in-memory pipeline chunks, tied
  // embeddings (the head borrows the embedding's unit): the fused one-process run.
  const std::string split = " --set parallel.split_backward=true";
  for (int zero = 1; zero <= 3; ++zero) {
    all.push_back({2, zero, "adamw", split, false, "split_dp2_zero" + std::to_string(zero)});
  }
  all.push_back({2, 3, "adamw",
                 split + " --set parallel.schedule=interleaved --set parallel.chunks=2", false,
                 "interleaved2_split_dp2_zero3"});
  all.push_back({2, 2, "adamw", "", true, "tied_dp2_zero2"});
  all.push_back({2, 3, "lamb", split, true, "tied_split_lamb_dp2_zero3"});
  return all;
}

INSTANTIATE_TEST_SUITE_P(DpZeroOptimizer, Parity, ::testing::ValuesIn(layouts()),
                         [](const ::testing::TestParamInfo<Layout>& i) { return i.param.name; });

// Gradient accumulation (stages 0-1 reduce once per step, 2-3 every micro-batch) and a dp that
// divides no bucket (3 ranks: shards padded) train the same run too.
struct Variant {
  int dp, zero, accum, micro_batch;
};

class ParityVariant : public ::testing::TestWithParam<Variant> {};

TEST_P(ParityVariant, SameRun) {
  const Variant v = GetParam();
  const std::string tag = "dp" + std::to_string(v.dp) + "_z" + std::to_string(v.zero) + "_a" +
                          std::to_string(v.accum) + "_b" + std::to_string(v.micro_batch);
  const std::string run = fresh_dir("variant_" + tag);
  const std::string shape = " --set train.grad_accum=" + std::to_string(v.accum) +
                            " --set train.micro_batch=" + std::to_string(v.micro_batch);
  const std::string ref = shared_run(kEnv + train_flags("adamw") + shape);
  const auto r =
      run_trillion(kEnv + "launch -n " + std::to_string(v.dp) + " -- " + train_args(run, "adamw") +
                   shape + " --set parallel.dp=" + std::to_string(v.dp) +
                   " --set parallel.zero=" + std::to_string(v.zero));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto cmp = run_trillion("compare " + ref + " " + run + " --tol 1e-5");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
  const auto ma = read_metrics(ref), mb = read_metrics(run);
  ASSERT_EQ(mb.size(), 4u);
  const double n = v.dp, pass = kParams * (n - 1) / n * 4;
  for (size_t s = 0; s < ma.size(); ++s) {
    const double a = ma[s]["loss"], b = mb[s]["loss"];
    EXPECT_LE(std::abs(a - b), 1e-5 * std::abs(a)) << "step " << s + 1;
    const auto& dp = mb[s]["comm"]["dp"];
    if (v.zero == 0) {
      EXPECT_NEAR(dp["all_reduce"].get<double>(), 2 * pass, 64);  // once per step
    } else if (v.dp == 2) {                                       // divisible: exact
      EXPECT_EQ(dp["reduce_scatter"].get<double>(), (v.zero >= 2 ? v.accum : 1) * pass);
      EXPECT_EQ(dp["all_gather"].get<double>(), (v.zero == 3 ? 2 * v.accum : 1) * pass);
    }
  }
  // Padding adds at most n - 1 elements per bucket (4 units here) to each sharded state.
  const plan::ModelStates f = plan::zero_model_states(kParams, v.zero, v.dp, 4, 4, 8);
  const double slack = (v.dp - 1) * 4 * 8.0;
  for (const auto& rank : read_json(run + "/summary.json")["memory_per_rank"]) {
    const double opt = rank["current"]["optimizer"].get<double>();
    EXPECT_GE(opt, f.optimizer);
    EXPECT_LE(opt, f.optimizer + (v.zero >= 1 ? 2 * slack : 0)) << rank;
  }
}

INSTANTIATE_TEST_SUITE_P(AccumulationAndPadding, ParityVariant,
                         ::testing::Values(Variant{2, 0, 2, 4}, Variant{2, 1, 2, 4},
                                           Variant{2, 2, 2, 4}, Variant{2, 3, 2, 4},
                                           Variant{3, 1, 1, 6}, Variant{3, 2, 1, 6},
                                           Variant{3, 3, 1, 6}),
                         [](const ::testing::TestParamInfo<Variant>& i) {
                           return "dp" + std::to_string(i.param.dp) + "_zero" +
                                  std::to_string(i.param.zero) + "_accum" +
                                  std::to_string(i.param.accum) + "_batch" +
                                  std::to_string(i.param.micro_batch);
                         });

TEST(Launch, TheDocumentedInterfaceTrainsTinyWithZero3) {
  const std::string dir = fresh_dir("launch_interface"), ref = fresh_dir("launch_interface_ref");
  ASSERT_EQ(
      run_trillion(kEnv + "train " + config_path("tiny.toml") + " --run-dir " + ref + " --quiet")
          .exit_code,
      0);
  const auto r = run_trillion(kEnv + "launch -n 4 -- train " + config_path("tiny.toml") +
                              " --run-dir " + dir + " --set parallel.dp=4 --set parallel.zero=3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step 20/20"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("[rank "), std::string::npos) << r.output;  // only rank 0 prints
  const auto summary = read_json(dir + "/summary.json");
  EXPECT_EQ(summary["world_size"], 4);
  EXPECT_EQ(summary["steps"], 20);
  const auto a = read_metrics(ref), b = read_metrics(dir);
  ASSERT_EQ(b.size(), 20u);
  for (size_t s = 0; s < a.size(); ++s) {
    const double la = a[s]["loss"], lb = b[s]["loss"];
    EXPECT_LE(std::abs(la - lb), 1e-5 * la) << "step " << s + 1;
  }
}

TEST(Launch, Zero3RunResumesBitwise) {
  const std::string whole = fresh_dir("z3_whole"), parts = fresh_dir("z3_parts");
  const std::string common = kEnv + "launch -n 2 -- train " + config_path("tiny.toml") +
                             " --quiet --set train.steps=4 --set parallel.dp=2 --set "
                             "parallel.zero=3 --set optim.name=lamb --run-dir ";
  ASSERT_EQ(run_trillion(common + whole).exit_code, 0);
  ASSERT_EQ(run_trillion(common + parts + " --stop-after 2").exit_code, 0);
  const auto resumed = run_trillion(common + parts + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto cmp = run_trillion("compare " + whole + " " + parts + " --tol 0");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
}

TEST(Launch, WrongProcessCountIsOneLineWithTheFix) {
  const std::string dir = fresh_dir("dp_mismatch");
  const auto alone = run_trillion(kEnv + "train " + config_path("tiny.toml") + " --run-dir " + dir +
                                  " --set parallel.dp=2");
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_NE(alone.output.find("the job has 1 process(es) but pp*dp*cp*tp = 1*2*1*1 = 2; launch 2 "
                              "process(es) (trillion launch -n 2)"),
            std::string::npos)
      << alone.output;
  const auto launched =
      run_trillion(kEnv + "launch -n 2 -- train " + config_path("tiny.toml") + " --run-dir " +
                   fresh_dir("dp_mismatch2") + " --set parallel.dp=4");
  EXPECT_EQ(launched.exit_code, 2);
  EXPECT_EQ(std::count(launched.output.begin(), launched.output.end(), '\n'), 1) << launched.output;
  EXPECT_NE(launched.output.find("the job has 2 process(es) but pp*dp*cp*tp = 1*4*1*1 = 4"),
            std::string::npos)
      << launched.output;
}

TEST(Config, ParallelKeysAreValidated) {
  const std::string dir = fresh_dir("parallel_keys");
  const std::pair<std::string, std::string> cases[] = {
      {"parallel.zero=4", "parallel.zero = 4: expected a ZeRO stage 0, 1, 2 or 3"},
      {"parallel.dp=3", "parallel.dp = 3 does not divide train.micro_batch = 4"},
      {"optim.name=adam", "supported optimizers: adamw, lamb, sgd"},
      {"parallel.buckets=3", "unknown key 'parallel.buckets'"},
  };
  for (const auto& [set, expect] : cases) {
    const auto r =
        run_trillion("train " + config_path("tiny.toml") + " --run-dir " + dir + " --set " + set);
    EXPECT_EQ(r.exit_code, 2) << set;
    EXPECT_NE(r.output.find(expect), std::string::npos) << set << "\n" << r.output;
  }
}

}  // namespace
}  // namespace trillion
