// trillion report: the page has one <svg> per numeric metric of metrics.jsonl, and each plot's
// axis range (data-y-min/max, and the first and last y tick labels) is the data's min and max;
// a constant gets a +-5% band with distinct tick labels, bytes are shown in MB/GB, the
// wall-clock stamp as elapsed seconds.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "../train/cli_util.h"

namespace trillion {
namespace {

TEST(Report, OnePlotPerMetricWithTheDataRange) {
  const std::string root = testing::fresh_dir("report");
  std::filesystem::create_directories(root + "/run");
  {
    std::ofstream m(root + "/run/metrics.jsonl");
    m << R"({"step":1,"loss":4.5,"lr":0.001,"memory":{"parameters":138600000},"time":1796000000.5})"
         "\n"
      << R"({"step":2,"loss":3.25,"lr":0.002,"memory":{"parameters":138600000},"time":1796000002})"
         "\n"
      << R"({"step":3,"loss":3.75,"val_loss":3.5,"lr":0.0015,"memory":{"parameters":138600000},"time":1796000005.5})"
         "\n";
  }
  {  // the run's MFU and the peak it divides by (train/mfu_peak.h) head the page
    std::ofstream summary(root + "/run/summary.json");
    summary << R"({"mfu":0.4125,"mfu_peak":"peak 191.3 GFLOP/s per process: fp32 GEMM"})";
  }
  const auto r = testing::run_trillion("report " + root + "/run --out " + root + "/r.html");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(root + "/r.html");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string html = ss.str();
  const std::regex svg(
      "<svg class=\"plot\" data-metric=\"([^\"]+)\" data-x-min=\"([^\"]+)\" "
      "data-x-max=\"([^\"]+)\" data-y-min=\"([^\"]+)\" data-y-max=\"([^\"]+)\"");
  std::map<std::string, std::array<double, 4>> plots;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), svg); it != std::sregex_iterator();
       ++it) {
    plots[(*it)[1]] = {std::stod((*it)[2]), std::stod((*it)[3]), std::stod((*it)[4]),
                       std::stod((*it)[5])};
  }
  ASSERT_EQ(plots.size(), 5u);  // loss, lr, memory.parameters, time.elapsed_s, val_loss
  EXPECT_NE(html.find("/run: MFU 41.2% against the peak 191.3 GFLOP/s per process: fp32 GEMM</li>"),
            std::string::npos);
  EXPECT_EQ(plots["loss"], (std::array<double, 4>{1, 3, 3.25, 4.5}));
  EXPECT_EQ(plots["lr"], (std::array<double, 4>{1, 3, 0.001, 0.002}));
  // A constant gets a +-5% band, its ticks in MB and distinct: 131.67 .. 145.53 MB.
  EXPECT_EQ(plots["memory.parameters"], (std::array<double, 4>{1, 3, 138600000 - 138600000 * 0.05,
                                                               138600000 + 138600000 * 0.05}));
  EXPECT_NE(html.find(">131.7 MB</text>"), std::string::npos);
  EXPECT_NE(html.find(">138.6 MB</text>"), std::string::npos);
  EXPECT_NE(html.find(">145.5 MB</text>"), std::string::npos);
  // A one-point series is drawn as a dot (a one-point polyline shows nothing).
  const size_t val = html.find("data-metric=\"val_loss\"");
  ASSERT_NE(val, std::string::npos);
  const std::string val_svg = html.substr(val, html.find("</svg>", val) - val);
  EXPECT_NE(val_svg.find("<circle"), std::string::npos);
  // The wall-clock stamp is plotted as seconds since the first line.
  EXPECT_EQ(plots["time.elapsed_s"], (std::array<double, 4>{1, 3, 0, 5}));
  EXPECT_EQ(plots.count("time"), 0u);
  EXPECT_EQ(plots["val_loss"],
            (std::array<double, 4>{2, 4, 3.5 - 3.5 * 0.05, 3.5 + 3.5 * 0.05}));  // one point
  EXPECT_NE(html.find(">3.25</text>"), std::string::npos);  // lowest y tick of loss
  EXPECT_NE(html.find(">4.5</text>"), std::string::npos);
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org/2000/svg"));  // no network
  EXPECT_EQ(testing::run_trillion("report " + root + "/nothing").exit_code, 2);
}

}  // namespace
}  // namespace trillion
