// `trillion schedule` end to end: its --json reports the simulator's bubble fraction and peak
// in-flight activations, --svg writes a drawing, and bad input is a one-line user error.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "../train/cli_util.h"

namespace {

// Runs the trillion binary; returns stdout and sets *rc to the exit status.
std::string run(const std::string& args, int* rc) {
  const auto r = trillion::testing::run_trillion(args, /*with_stderr=*/false);
  *rc = r.exit_code;
  return r.output;
}

TEST(ScheduleCli, JsonReportsBubbleAndPeak) {
  int rc = 0;
  const auto j =
      nlohmann::json::parse(run("schedule --kind 1f1b --stages 4 --microbatches 8 --json", &rc));
  ASSERT_EQ(rc, 0);
  EXPECT_NEAR(j["bubble_fraction"].get<double>(), 3.0 / 11.0, 1e-12);
  EXPECT_EQ(j["peak_inflight"], nlohmann::json({4.0, 3.0, 2.0, 1.0}));
  EXPECT_EQ(j["actions"][0][0], "0F0");
  EXPECT_EQ(j["actions"][1][0], "1RECV_F0");
  const auto k = nlohmann::json::parse(
      run("schedule --kind interleaved --stages 4 --microbatches 8 --chunks 2 --json", &rc));
  EXPECT_NEAR(k["bubble_fraction"].get<double>(), 3.0 / 19.0, 1e-12);
  const auto z = nlohmann::json::parse(
      run("schedule --kind zb-h1 --stages 4 --microbatches 8 --costs 1,1,1 --json", &rc));
  EXPECT_NEAR(z["bubble_fraction"].get<double>(), 3.0 / 27.0, 1e-12);
  const auto d = nlohmann::json::parse(
      run("schedule --kind dualpipe --stages 8 --microbatches 16 --json", &rc));
  EXPECT_NEAR(d["bubble_fraction"].get<double>(), 6.0 / 54.0, 1e-12);
}

TEST(ScheduleCli, WritesSvgAndRejectsBadInput) {
  const std::string svg = testing::TempDir() + "/sched.svg";
  int rc = 0;
  const std::string text =
      run("schedule --kind gpipe --stages 2 --microbatches 3 --svg " + svg, &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_NE(text.find("rank  1 |"), std::string::npos);
  std::ifstream in(svg);
  std::stringstream body;
  body << in.rdbuf();
  EXPECT_NE(body.str().find("<svg"), std::string::npos);
  EXPECT_NE(body.str().find("1F2"), std::string::npos);
  run("schedule --kind zigzag --stages 2 --microbatches 3", &rc);
  EXPECT_EQ(rc, 2);
  run("schedule --kind interleaved --stages 4 --microbatches 6", &rc);
  EXPECT_EQ(rc, 2);
  run("schedule --kind 1f1b --costs 1,x,1", &rc);
  EXPECT_EQ(rc, 2);
}

}  // namespace
