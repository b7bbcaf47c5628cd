// See run_report.h.
#include "interop/run_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace trillion::interop {

namespace {

using Series = std::vector<std::pair<double, double>>;  // (step, value)

void flatten(const nlohmann::json& j, const std::string& prefix, double step,
             std::map<std::string, Series>& out) {
  for (const auto& [k, v] : j.items()) {
    const std::string name = prefix.empty() ? k : prefix + "." + k;
    if (v.is_object())
      flatten(v, name, step, out);
    else if (v.is_number() && name != "step")
      out[name].push_back({step, v.get<double>()});
  }
}

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else if (c == '"')
      o += "&quot;";
    else
      o += c;
  }
  return o;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Tick labels with the fewest significant digits (at least 4) that tell the five apart.
std::vector<std::string> tick_labels(const std::vector<double>& v, const std::string& unit) {
  std::vector<std::string> out;
  for (int digits = 4; digits <= 12; ++digits) {
    out.clear();
    for (double x : v) out.push_back(fmt::format("{:.{}g}{}", x, digits, unit));
    bool distinct = true;
    for (size_t i = 1; i < out.size(); ++i) distinct = distinct && out[i] != out[i - 1];
    if (distinct) break;
  }
  return out;
}

// Byte counts (memory.*, *bytes) are shown in the largest decimal unit below their maximum.
std::pair<double, std::string> byte_scale(const std::string& name, double max_abs) {
  const bool bytes = name.rfind("memory.", 0) == 0 ||
                     (name.size() >= 5 && name.compare(name.size() - 5, 5, "bytes") == 0);
  if (!bytes) return {1.0, ""};
  for (auto [scale, unit] : {std::pair{1e12, " TB"}, {1e9, " GB"}, {1e6, " MB"}, {1e3, " kB"}})
    if (max_abs >= scale) return {scale, unit};
  return {1.0, " B"};
}

constexpr const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"};

std::string plot(const std::string& name, const std::vector<const Series*>& runs) {
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const Series* s : runs) {
    if (!s) continue;
    for (auto [x, y] : *s) {
      if (!std::isfinite(y)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  }
  if (!std::isfinite(x0)) return "";
  if (x1 == x0) x0 -= 1, x1 += 1;
  // A constant: a band of +-5% around it (+-1 around 0), so its ticks read differently.
  if (y1 == y0) {
    const double pad = y0 == 0 ? 1.0 : std::abs(y0) * 0.05;
    y0 -= pad, y1 += pad;
  }
  const auto [scale, unit] = byte_scale(name, std::max(std::abs(y0), std::abs(y1)));
  std::vector<double> xs, ys;
  for (int i = 0; i <= 4; ++i) {  // five ticks per axis, from min to max
    xs.push_back(x0 + (x1 - x0) * i / 4);
    ys.push_back(y0 + (y1 - y0) * i / 4);
  }
  std::vector<double> scaled;
  for (double y : ys) scaled.push_back(y / scale);
  const std::vector<std::string> ylabels = tick_labels(scaled, unit);
  std::vector<std::string> xlabels;
  for (double x : xs)  // steps: whole numbers once the axis spans a few of them
    xlabels.push_back(x1 - x0 >= 8 ? fmt::format("{:.0f}", x) : fmt::format("{:.4g}", x));
  const double W = 480, H = 240, L = 70, R = 10, T = 20, B = 35;
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return H - B - (y - y0) / (y1 - y0) * (H - T - B); };
  std::string svg = fmt::format(
      "<svg class=\"plot\" data-metric=\"{}\" data-x-min=\"{:.17g}\" data-x-max=\"{:.17g}\" "
      "data-y-min=\"{:.17g}\" data-y-max=\"{:.17g}\" width=\"{}\" height=\"{}\" "
      "xmlns=\"http://www.w3.org/2000/svg\">\n<text x=\"{}\" y=\"14\" class=\"title\">{}</text>\n",
      escape(name), x0, x1, y0, y1, W, H, L, escape(name));
  svg += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#000\"/>\n", L, H - B,
                     W - R, H - B);
  svg += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#000\"/>\n", L, T, L,
                     H - B);
  for (int i = 0; i <= 4; ++i) {
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#000\"/>"
        "<text class=\"xtick\" x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        px(xs[i]), H - B, H - B + 4, H - B + 16, xlabels[i]);
    svg += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#000\"/>"
        "<text class=\"ytick\" x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        L - 4, py(ys[i]), L, L - 6, py(ys[i]) + 4, escape(ylabels[i]));
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">step</text>\n",
                     (L + W - R) / 2, H - 4);
  for (size_t r = 0; r < runs.size(); ++r) {
    if (!runs[r]) continue;
    std::string points;
    for (auto [x, y] : *runs[r])
      if (std::isfinite(y)) points += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
    svg +=
        fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>\n",
                    kColours[r % 5], points);
    // Sparse series (evaluations, a single point) also get a dot per point: a one-point
    // polyline draws nothing.
    if (runs[r]->size() <= 40) {
      for (auto [x, y] : *runs[r]) {
        if (std::isfinite(y))
          svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"{}\"/>\n",
                             px(x), py(y), kColours[r % 5]);
      }
    }
  }
  return svg + "</svg>\n";
}

}  // namespace

std::string run_report_html(const std::vector<std::string>& run_dirs) {
  std::vector<std::map<std::string, Series>> metrics(run_dirs.size());
  std::vector<std::string> names;
  for (size_t r = 0; r < run_dirs.size(); ++r) {
    const std::string path = run_dirs[r] + "/metrics.jsonl";
    std::ifstream in(path);
    if (!in)
      throw Error(fmt::format("cannot read '{}': is '{}' a run directory?", path, run_dirs[r]));
    std::string line;
    int64_t line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (line.empty()) continue;
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception&) {
        throw Error(fmt::format("{}:{}: not a JSON object", path, line_no));
      }
      if (!j.is_object() || !j.contains("step") || !j["step"].is_number())
        throw Error(fmt::format("{}:{}: a metrics line needs a numeric 'step'", path, line_no));
      flatten(j, "", j["step"].get<double>(), metrics[r]);
    }
    // The wall-clock stamp plots as seconds since the run's first line (a Unix time axis reads
    // 1.796e+09 on every tick).
    if (auto t = metrics[r].find("time"); t != metrics[r].end()) {
      Series elapsed = t->second;
      for (auto& [step, v] : elapsed) v -= t->second.front().second;
      metrics[r].erase(t);
      metrics[r]["time.elapsed_s"] = std::move(elapsed);
    }
    for (const auto& [k, v] : metrics[r])
      if (std::find(names.begin(), names.end(), k) == names.end()) names.push_back(k);
  }
  std::sort(names.begin(), names.end());
  std::string html =
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>trillion report</title>\n"
      "<style>body{font-family:sans-serif;margin:20px} .plot{margin:6px;border:1px solid #ddd}"
      " .title{font-weight:bold;font-size:13px} text{font-size:11px} pre{background:#f6f6f6;"
      "padding:8px;overflow:auto;max-height:400px}</style></head><body>\n<h1>trillion report</h1>\n"
      "<ul class=\"runs\">\n";
  for (size_t r = 0; r < run_dirs.size(); ++r)
    html += fmt::format("<li style=\"color:{}\">{}</li>\n", kColours[r % 5], escape(run_dirs[r]));
  html += "</ul>\n<h2>Metrics</h2>\n<div class=\"plots\">\n";
  for (const std::string& n : names) {
    std::vector<const Series*> runs;
    for (auto& m : metrics) runs.push_back(m.count(n) ? &m.at(n) : nullptr);
    html += plot(n, runs);
  }
  html += "</div>\n";
  for (const std::string& dir : run_dirs) {
    html += "<h2>" + escape(dir) + "</h2>\n";
    for (const char* file : {"summary.json", "events.log", "config.toml"}) {
      if (!std::filesystem::exists(dir + "/" + file)) continue;
      html += fmt::format("<h3>{}</h3><pre>{}</pre>\n", file, escape(read_text(dir + "/" + file)));
    }
  }
  return html + "</body></html>\n";
}

}  // namespace trillion::interop
