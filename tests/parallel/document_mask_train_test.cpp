// Document masking in whole runs under `trillion launch` (docs/data.md): random tokens in [0, 8)
// with token 7 as the document end (about four documents per 32-token sequence), attention inside
// documents, RoPE restarting per document and the cross-boundary predictions out of the loss.
// cp 2 zigzag, tp 2, pp 2 and dp 2 each train the one-process masked run (configs/tiny.toml,
// 2 steps of 2 micro-batches, attention tiles of 3; ONE shared reference): losses and final
// weights within 1e-5 (`trillion compare`). The reference skips tiles (summary.json "documents")
// and differs from the same run without the mask, so the layouts match a masked run.
#include <gtest/gtest.h>

#include "../train/cli_util.h"

namespace trillion {
namespace {

using testing::config_path;
using testing::fresh_dir;
using testing::one_thread_per_rank;
using testing::read_json;
using testing::run_trillion;
using testing::shared_run;

const std::string kEnv = one_thread_per_rank();

std::string flags() {
  return "train " + config_path("tiny.toml") +
         " --quiet --set train.steps=2 --set model.attention_block=3 --set train.grad_accum=2"
         " --set data.vocab=8 --set data.document_end_id=7 --set data.document_mask=true"
         " --set data.restart_positions=true --set data.mask_boundary_loss=true";
}

struct Layout {
  std::string name, set;
};
void PrintTo(const Layout& l, std::ostream* os) {
  *os << l.name;
}

class DocumentMaskRun : public ::testing::TestWithParam<Layout> {};

TEST_P(DocumentMaskRun, TrainsTheOneProcessMaskedRun) {
  const Layout l = GetParam();
  const std::string ref = shared_run(kEnv + flags());
  const std::string run = fresh_dir("h37_documents_" + l.name);
  const auto r =
      run_trillion(kEnv + "launch -n 2 -- " + flags() + " --run-dir " + run + " " + l.set);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto cmp = run_trillion("compare " + ref + " " + run + " --tol 1e-5");
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
  EXPECT_NE(cmp.output.find("MATCH"), std::string::npos) << cmp.output;
}

INSTANTIATE_TEST_SUITE_P(Layouts, DocumentMaskRun,
                         ::testing::Values(Layout{"cp2_zigzag",
                                                  "--set parallel.cp=2 --set "
                                                  "parallel.cp_split=zigzag"},
                                           Layout{"tp2", "--set parallel.tp=2"},
                                           Layout{"pp2", "--set parallel.pp=2"},
                                           Layout{"dp2", "--set parallel.dp=2"}),
                         [](const auto& info) { return info.param.name; });

TEST(DocumentMaskRun, ReferenceSkipsTilesAndDiffersFromTheUnmaskedRun) {
  const std::string ref = shared_run(kEnv + flags());
  const auto summary = read_json(ref + "/summary.json");
  ASSERT_TRUE(summary.contains("documents")) << summary.dump();
  EXPECT_EQ(summary["documents"]["document_end_id"].get<int>(), 7);
  EXPECT_GT(summary["documents"]["attention_skipped_flops"].get<double>(), 0.0);
  EXPECT_GT(summary["documents"]["attention_computed_flops"].get<double>(), 0.0);
  const std::string plain = fresh_dir("h37_documents_unmasked");
  const auto r = run_trillion(kEnv + flags() +
                              " --set data.document_mask=false --set data.restart_positions=false"
                              " --run-dir " +
                              plain);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto cmp = run_trillion("compare " + ref + " " + plain + " --tol 1e-5");
  EXPECT_NE(cmp.exit_code, 0) << cmp.output;
  EXPECT_NE(cmp.output.find("DIFFER"), std::string::npos) << cmp.output;
}

}  // namespace
}  // namespace trillion
