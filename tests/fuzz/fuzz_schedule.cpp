// Fuzz target: the pipeline schedule generator, simulator and renderers under any shape and any
// costs (issue 39 item 8: costs 1e12 apart made the grid ask for more cells than a vector can
// hold). Input: four shape bytes (kind, stages 1..8, micro-batches 1..32, chunks 1..3), then the
// costs as text "F,B,W[,COMM]" as `trillion schedule --costs` takes them. Properties: an accepted
// schedule validates, its makespan is finite and >= 0, and the grid stays a bounded text.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz_target.h"
#include "schedule/generators.h"
#include "schedule/render.h"
#include "schedule/simulator.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trillion;
  if (size < 4) return 0;
  const auto kind = static_cast<schedule::ScheduleKind>(data[0] % 6);
  const int stages = 1 + data[1] % 8, microbatches = 1 + data[2] % 32, chunks = 1 + data[3] % 3;
  std::vector<double> v;
  const std::string text(fuzz::as_text(data + 4, size - 4));
  size_t at = 0;
  while (at <= text.size() && v.size() < 4) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    char* end = nullptr;
    const double x = std::strtod(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size() || !std::isfinite(x)) return 0;
    v.push_back(x);
    at = comma + 1;
  }
  if (v.size() < 3) return 0;
  const schedule::OpCosts costs{v[0], v[1], v[2], v.size() == 4 ? v[3] : 0.0};
  try {
    const schedule::Schedule s =
        schedule::generate_schedule(kind, stages, microbatches, chunks, costs);
    fuzz::fuzz_require(schedule::validate(s).empty(), "a generated schedule validates");
    const schedule::Simulation sim = schedule::simulate(s, costs);
    fuzz::fuzz_require(std::isfinite(sim.makespan), "the makespan is finite");
    const std::string grid = schedule::render_grid(s, sim);
    fuzz::fuzz_require(grid.size() < (size_t{1} << 20), "the grid is a bounded text");
    schedule::render_svg(s, sim);
  } catch (const Error&) {
  }
  return 0;
}
