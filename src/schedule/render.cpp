// See render.h.
#include "schedule/render.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>

namespace trillion::schedule {
namespace {

std::string label(const Action& a) {
  std::string k(kind_name(a.kind));
  if (a.chunk % 2 == 1)
    for (char& c : k) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return k + std::to_string(a.microbatch);
}

}  // namespace

std::string render_grid(const Schedule& s, const Simulation& sim, int max_cells) {
  double cell = 0.0;
  for (const auto& row : sim.timeline)
    for (const TimedAction& t : row)
      if (is_compute(t.action.kind) && t.end > t.start)
        cell = cell == 0.0 ? t.end - t.start : std::min(cell, t.end - t.start);
  if (cell == 0.0) return "(empty schedule)\n";
  // In doubles until clamped: costs far apart (--costs 1e12,1,1) make more cells than an int
  // holds, and the grid shows at most max_cells of them.
  const double cells = std::ceil(sim.makespan / cell - 1e-9);
  const int shown = static_cast<int>(std::min(cells, static_cast<double>(max_cells)));
  auto cell_of = [&](double x) {  // x's cell index, clamped to [0, shown]
    return static_cast<int>(std::clamp(x, 0.0, static_cast<double>(shown)));
  };
  int width = 2;
  for (const auto& row : sim.timeline)
    for (const TimedAction& t : row)
      if (is_compute(t.action.kind)) width = std::max<int>(width, label(t.action).size());
  std::string out;
  for (int r = 0; r < s.num_ranks; ++r) {
    std::vector<std::string> grid(shown, ".");
    for (const TimedAction& t : sim.timeline[r]) {
      if (!is_compute(t.action.kind)) continue;
      const int first = cell_of(std::floor(t.start / cell + 1e-9));
      const int last = cell_of(std::ceil(t.end / cell - 1e-9));
      for (int c = first; c < last; ++c) grid[c] = label(t.action);
    }
    out += fmt::format("rank {:>2} |", r);
    for (const std::string& g : grid) out += fmt::format(" {:<{}}", g, width);
    out += '\n';
  }
  if (shown < cells) out += fmt::format("(first {} of {:.4g} time cells shown)\n", shown, cells);
  return out;
}

std::string render_svg(const Schedule& s, const Simulation& sim) {
  // About 1600 px wide whatever the time unit (abstract costs or seconds).
  const double scale = 1600.0 / std::max(sim.makespan, 1e-12);
  const int row = 28, left = 70, top = 30;
  const double width = left + sim.makespan * scale + 20;
  const double height = top + s.num_ranks * row + 50;
  // F blue, B green, W orange; chunk 1 (and odd chunks) darker.
  auto colour = [](const Action& a) {
    static const char* kLight[] = {"#6baed6", "#74c476", "#fdae6b"};
    static const char* kDark[] = {"#2171b5", "#238b45", "#d94801"};
    const int k = static_cast<int>(a.kind);
    return a.chunk % 2 == 1 ? kDark[k] : kLight[k];
  };
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "font-family=\"monospace\" font-size=\"11\">\n"
      "<text x=\"{}\" y=\"18\">{} p={} m={} v={}: bubble {:.1f}% (red = idle)</text>\n",
      width, height, left, schedule_kind_name(s.kind), s.num_ranks, s.num_microbatches,
      s.num_chunks, 100.0 * sim.bubble_fraction);
  for (int r = 0; r < s.num_ranks; ++r) {
    const int y = top + r * row;
    out += fmt::format(
        "<text x=\"4\" y=\"{}\">rank {}</text>\n<rect x=\"{}\" y=\"{}\" width=\"{:.2f}\" "
        "height=\"{}\" fill=\"#f4c7c3\"/>\n",
        y + row / 2 + 4, r, left, y + 2, sim.makespan * scale, row - 4);
    for (const TimedAction& t : sim.timeline[r]) {
      if (!is_compute(t.action.kind) || t.end <= t.start) continue;
      const double x = left + t.start * scale, w = (t.end - t.start) * scale;
      out += fmt::format(
          "<rect x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\" "
          "stroke=\"#ffffff\" stroke-width=\"0.5\"><title>{}</title></rect>\n",
          x, y + 2, w, row - 4, colour(t.action), to_string(t.action));
      if (w >= 14)
        out += fmt::format("<text x=\"{:.2f}\" y=\"{}\" font-size=\"9\">{}</text>\n", x + 2,
                           y + row / 2 + 3, label(t.action));
    }
  }
  const int ly = top + s.num_ranks * row + 20;
  out += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"#6baed6\"/><text x=\"{}\" "
      "y=\"{}\">F</text><rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"#74c476\"/>"
      "<text x=\"{}\" y=\"{}\">B (input grad)</text><rect x=\"{}\" y=\"{}\" width=\"12\" "
      "height=\"12\" fill=\"#fdae6b\"/><text x=\"{}\" y=\"{}\">W (weight grad); darker = "
      "chunk 1</text>\n</svg>\n",
      left, ly, left + 16, ly + 10, left + 40, ly, left + 56, ly + 10, left + 170, ly, left + 186,
      ly + 10);
  return out;
}

}  // namespace trillion::schedule
