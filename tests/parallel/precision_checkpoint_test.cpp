// Checkpoints of precision-recipe runs (issue 14), configs/tiny.toml, 4 steps, a checkpoint every
// 2, stopped after step 2 and resumed:
// - at the same layout, the resumed run is bitwise the uninterrupted one (`trillion compare --tol
//   0`): nvfp4 in one process (its stochastic rounding is keyed by the step, so the stream resumes
//   where it stopped; the Hadamard signs by the seed alone) and bf16 with bf16 gradients (the
//   gradients are not state between steps: the checkpoint holds the fp32 master and
//   moments, and each step starts its bf16 gradients from zero);
// - at another layout, fp8 written at dp 2 ZeRO-3 resumes in one process and one process's
//   resumes at dp 2 ZeRO-3, each matching the uninterrupted run at the new layout within the
//   bounds precision_layouts.h derives for a layout that re-tiles (two of the four steps ran at
//   the other layout);
// - changing precision.* on resume is allowed and said: the checkpoint holds the fp32 master
//   weights and moments whatever the recipe (the bf16 copy is rebuilt from the master, gradients
//   are not saved), and switching recipes mid-run is a published practice (NVIDIA's NVFP4 recipe,
//   2509.25149, finishes in BF16). fp8 -> bf16: events.log names the change; the first resumed
//   step is the fp8 run's weights under bf16 arithmetic, so its loss differs from the
//   uninterrupted fp8 run's by a forward rounding change only (within precision_layouts.h's
//   2u |L - ln V| for E4M3, and not bitwise).
#include <gtest/gtest.h>

#include "precision_layouts.h"
#include "train/config_diff.h"

namespace trillion {
namespace {

using testing::compare_runs;
using testing::config_path;
using testing::fresh_dir;
using testing::has;
using testing::one_thread_per_rank;
using testing::read_metrics;
using testing::run_trillion;
using testing::shared_run;
using testing::slurp;

const std::string kEnv = one_thread_per_rank();

std::string launch(int ranks, const std::string& flags) {
  return kEnv + (ranks == 1 ? "" : "launch -n " + std::to_string(ranks) + " -- ") + "train " +
         config_path("tiny.toml") + " --quiet --set train.steps=4 --set train.checkpoint_every=2" +
         flags;
}

// Runs `from` to step 2, resumes it at `to` and returns the run directory.
std::string stop_and_resume(int from_ranks, const std::string& from, int to_ranks,
                            const std::string& to, const std::string& name) {
  const std::string dir = fresh_dir(name);
  const auto first =
      run_trillion(launch(from_ranks, from) + " --run-dir " + dir + " --stop-after 2");
  EXPECT_EQ(first.exit_code, 0) << first.output;
  const auto resumed = run_trillion(launch(to_ranks, to) + " --run-dir " + dir + " --resume");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(has(slurp(dir + "/events.log"),
                  "resumed from " + dir + "/checkpoints/step_00000002 at step 2"))
      << slurp(dir + "/events.log");
  return dir;
}

struct SameLayout {
  std::string name;
  int ranks;
  std::string flags;
};
void PrintTo(const SameLayout& c, std::ostream* os) {
  *os << c.name;
}

class PrecisionResume : public ::testing::TestWithParam<SameLayout> {};

TEST_P(PrecisionResume, ResumedRunIsBitwiseTheUninterruptedOne) {
  const SameLayout c = GetParam();
  const std::string whole = shared_run(launch(c.ranks, c.flags));
  ASSERT_EQ(read_metrics(whole).size(), 4u);
  const std::string parts =
      stop_and_resume(c.ranks, c.flags, c.ranks, c.flags, "precision_resume_" + c.name);
  const testing::RunDiffs d = compare_runs(whole, parts, 0);
  EXPECT_EQ(d.exit_code, 0) << d.output;
  testing::report("resume " + c.name, d);
}

INSTANTIATE_TEST_SUITE_P(
    Recipes, PrecisionResume,
    ::testing::Values(SameLayout{"nvfp4", 1, " --set precision.recipe=nvfp4"},
                      SameLayout{"bf16_grad_bf16", 1,
                                 " --set precision.recipe=bf16 --set precision.grad_dtype=bf16"}),
    [](const auto& i) { return i.param.name; });

// fp8 across layouts: the uninterrupted run at the new layout is the reference.
struct Move {
  std::string name;
  int from_ranks;
  std::string from;
  int to_ranks;
  std::string to;
};
void PrintTo(const Move& m, std::ostream* os) {
  *os << m.name;
}

class PrecisionReshard : public ::testing::TestWithParam<Move> {};

TEST_P(PrecisionReshard, Fp8ResumesAtTheNewLayoutWithinTheRecipesBounds) {
  const Move m = GetParam();
  const std::string reference = shared_run(launch(m.to_ranks, m.to));
  const std::string dir =
      stop_and_resume(m.from_ranks, m.from, m.to_ranks, m.to, "precision_reshard_" + m.name);
  const testing::RunDiffs d = testing::expect_within_retile_bounds("fp8", reference, dir, false);
  testing::report("fp8 reshard " + m.name, d);
}

const std::string kFp8Dp2Zero3 =
    " --set precision.recipe=fp8 --set parallel.dp=2 --set parallel.zero=3";
const std::string kFp8 = " --set precision.recipe=fp8";
INSTANTIATE_TEST_SUITE_P(Layouts, PrecisionReshard,
                         ::testing::Values(Move{"dp2_zero3_to_one", 2, kFp8Dp2Zero3, 1, kFp8},
                                           Move{"one_to_dp2_zero3", 1, kFp8, 2, kFp8Dp2Zero3}),
                         [](const auto& i) { return i.param.name; });

TEST(PrecisionResume, ChangingTheRecipeIsAllowedAndSaid) {
  for (const char* key : {"precision.recipe", "precision.grad_dtype", "precision.wgrad_hadamard"}) {
    EXPECT_FALSE(breaks_checkpoint(key)) << key;
  }
  const std::string fp8 = " --set precision.recipe=fp8";
  const std::string whole = shared_run(launch(1, fp8));
  const std::string dir = stop_and_resume(1, fp8, 1,
                                          " --set precision.recipe=bf16 --set "
                                          "precision.grad_dtype=bf16",
                                          "precision_resume_fp8_to_bf16");
  const std::string events = slurp(dir + "/events.log");
  EXPECT_TRUE(has(events,
                  "resumed with a changed config: precision.grad_dtype 'fp32' -> 'bf16', "
                  "precision.recipe 'fp8' -> 'bf16'"))
      << events;
  const auto a = read_metrics(whole), b = read_metrics(dir);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t s = 0; s < 2; ++s) EXPECT_EQ(a[s]["loss"], b[s]["loss"]) << "step " << s + 1;
  const double fp8_loss = a[2]["loss"], bf16_loss = b[2]["loss"];
  // The same weights under another forward rounding: precision_layouts.h's forward term. A run
  // that had not loaded the weights would start again from step 1's loss (6e-3 away here).
  EXPECT_NE(fp8_loss, bf16_loss);
  EXPECT_LE(std::fabs(fp8_loss - bf16_loss),
            1e-5 + 2 * testing::unit_roundoff("fp8") * std::fabs(fp8_loss - std::log(64.0)));
  std::printf("step 3 after fp8 -> bf16: loss %.8f, uninterrupted fp8 %.8f (diff %.3e)\n",
              bf16_loss, fp8_loss, std::fabs(fp8_loss - bf16_loss));
}

}  // namespace
}  // namespace trillion
