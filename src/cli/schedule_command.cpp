// `trillion schedule`: generate a pipeline schedule, validate it, simulate it with the given op
// costs and show it as a rank x time grid, an SVG timeline and/or JSON (bubble fraction, peak
// in-flight activations per rank and the per-rank action lists in their 2F0 text form).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/parse_arguments.h"
#include "core/error.h"
#include "plan/layout.h"
#include "schedule/generators.h"
#include "schedule/render.h"
#include "schedule/simulator.h"
#include "train/pipeline_trace.h"

namespace trillion::cli {
namespace {

schedule::OpCosts parse_costs(const std::string& text) {
  std::vector<double> v;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      size_t used = 0;
      v.push_back(std::stod(item, &used));
      if (used != item.size() || !std::isfinite(v.back())) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw Error(
          fmt::format("--costs '{}': '{}' is not a finite number; use F,B,W or F,B,W,COMM, "
                      "e.g. 1,1,1 or 1,1.2,0.8,0.05",
                      text, item));
    }
  }
  if (v.size() != 3 && v.size() != 4)
    throw Error(fmt::format("--costs '{}' has {} values; use F,B,W or F,B,W,COMM", text, v.size()));
  return {v[0], v[1], v[2], v.size() == 4 ? v[3] : 0.0};
}

// A measured step (trace.json of a run) drawn and summarised like a simulated one.
int draw_trace(const std::string& path, const std::string& svg_path, bool json) {
  nlohmann::json j;
  try {
    std::ifstream in(path);
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: not JSON: {}", path, e.what()));
  }
  const PipelineTrace trace = read_chrome_trace(j);
  schedule::Schedule s;
  s.kind = trace.kind;
  s.num_ranks = trace.ranks;
  s.num_microbatches = trace.microbatches;
  s.num_chunks = trace.chunks;
  const schedule::Simulation sim = measured_simulation(trace);
  if (!svg_path.empty()) {
    std::ofstream out(svg_path);
    if (!out) throw Error(fmt::format("--svg {}: cannot open the file for writing", svg_path));
    out << schedule::render_svg(s, sim);
  }
  if (json) {
    std::cout << nlohmann::json{{"kind", std::string(schedule::schedule_kind_name(s.kind))},
                                {"stages", s.num_ranks},
                                {"microbatches", s.num_microbatches},
                                {"chunks", s.num_chunks},
                                {"makespan_seconds", sim.makespan},
                                {"bubble_fraction", sim.bubble_fraction},
                                {"busy_seconds", sim.busy},
                                {"peak_slots", trace.peak_slots}}
                     .dump(2)
              << "\n";
    return 0;
  }
  std::cout << fmt::format(
      "measured {} step: {} pipeline ranks, {} micro-batches, {} chunk(s) "
      "per rank\n\n",
      schedule::schedule_kind_name(s.kind), s.num_ranks, s.num_microbatches, s.num_chunks);
  std::cout << schedule::render_grid(s, sim);
  std::cout << fmt::format("\nmakespan {:.4f} s; bubble {:.2f}% of rank time\n", sim.makespan,
                           100.0 * sim.bubble_fraction);
  if (!svg_path.empty()) std::cout << "SVG timeline written to " << svg_path << "\n";
  return 0;
}

}  // namespace

int schedule_command(int argc, char** argv) {
  CLI::App app{"Generate, validate, simulate and draw a pipeline schedule.", "trillion schedule"};
  std::string kind_name, costs_text = "1,1,1", svg_path;
  int stages = 4, microbatches = 8, chunks = 0;
  bool json = false, show_actions = false;
  app.add_option("--kind", kind_name, "gpipe, 1f1b, interleaved, zb-h1, zb-h2 or dualpipe");
  std::string layout_text;
  app.add_option("--layout", layout_text,
                 "the same fields as `trillion plan --layout`: pp=P,schedule=KIND,chunks=V "
                 "(other fields are ignored here)");
  app.add_option("--stages", stages, "pipeline ranks P")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 14));
  app.add_option("--microbatches", microbatches, "micro-batches per step M")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--chunks", chunks, "model chunks per rank V (interleaved; default 2)")
      ->check(CLI::Range(1, 64));
  app.add_option("--costs", costs_text,
                 "op times F,B,W[,COMM] of one full stage (B = input grad, W = weight grad)")
      ->capture_default_str();
  app.add_option("--svg", svg_path, "write an SVG timeline to this file");
  std::string trace_path;
  app.add_option("--from-trace", trace_path,
                 "draw a measured pipeline step: RUN_DIR/trace.json of a multi-stage run")
      ->check(CLI::ExistingFile);
  app.add_flag("--json", json, "print JSON (bubble_fraction, peak_inflight, actions, ...)");
  app.add_flag("--actions", show_actions, "also print each rank's action list");
  if (const int rc = parse_arguments(app, argc, argv); rc >= 0) return rc;
  if (!trace_path.empty()) return draw_trace(trace_path, svg_path, json);
  if (!layout_text.empty()) {
    plan::LayoutFields f;
    const plan::Layout l = plan::parse_layout(layout_text, &f);
    auto clash = [&](bool set, const char* flag, const char* key) {
      if (set) throw Error(fmt::format("{} and --layout {}= both given; use one", flag, key));
    };
    if (f.pp) clash(app.count("--stages") > 0, "--stages", "pp"), stages = l.pp;
    if (f.schedule)
      clash(!kind_name.empty(), "--kind", "schedule"),
          kind_name = std::string(schedule::schedule_kind_name(l.schedule));
    if (f.chunks) clash(chunks != 0, "--chunks", "chunks"), chunks = l.chunks;
  }
  if (kind_name.empty())
    throw Error(
        "schedule needs --kind KIND or --layout ...,schedule=KIND (gpipe, 1f1b, "
        "interleaved, zb-h1, zb-h2, dualpipe)");
  const schedule::ScheduleKind kind = schedule::parse_schedule_kind(kind_name);
  if (chunks == 0)
    chunks =
        kind == schedule::ScheduleKind::kInterleaved || kind == schedule::ScheduleKind::kDualPipe
            ? 2
            : 1;
  const schedule::OpCosts costs = parse_costs(costs_text);
  // A schedule holds about 3 P M V actions (F, B, W of every micro-batch and chunk per rank):
  // bound it so a typo cannot ask for terabytes.
  constexpr int64_t kMaxActions = int64_t{1} << 26;
  if (3 * int64_t{stages} * microbatches * chunks > kMaxActions) {
    throw Error(fmt::format(
        "--stages {} x --microbatches {} x --chunks {} makes more than {} actions; choose "
        "smaller values",
        stages, microbatches, chunks, kMaxActions));
  }
  const schedule::Schedule s =
      schedule::generate_schedule(kind, stages, microbatches, chunks, costs);
  const auto problems = schedule::validate(s);
  if (!problems.empty())
    throw Error(fmt::format("internal: generated schedule is invalid: {}", problems.front()));
  const schedule::Simulation sim = schedule::simulate(s, costs);
  if (!svg_path.empty()) {
    std::ofstream out(svg_path);
    if (!out) throw Error(fmt::format("--svg {}: cannot open the file for writing", svg_path));
    out << schedule::render_svg(s, sim);
  }
  if (json) {
    nlohmann::json j;
    j["kind"] = std::string(schedule::schedule_kind_name(kind));
    j["stages"] = stages;
    j["microbatches"] = microbatches;
    j["chunks"] = s.num_chunks;
    j["costs"] = {{"forward", costs.forward},
                  {"backward_input", costs.backward_input},
                  {"backward_weight", costs.backward_weight},
                  {"comm", costs.comm}};
    j["makespan"] = sim.makespan;
    j["bubble_fraction"] = sim.bubble_fraction;
    j["peak_inflight"] = sim.peak_inflight;
    j["busy"] = sim.busy;
    nlohmann::json actions = nlohmann::json::array();
    for (const auto& list : s.actions) {
      nlohmann::json row = nlohmann::json::array();
      for (const schedule::Action& a : list) row.push_back(schedule::to_string(a));
      actions.push_back(row);
    }
    j["actions"] = actions;
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format(
      "{} schedule: {} stages, {} micro-batches, {} chunk(s) per rank; "
      "costs F={} B={} W={} comm={}\n\n",
      schedule::schedule_kind_name(kind), stages, microbatches, s.num_chunks, costs.forward,
      costs.backward_input, costs.backward_weight, costs.comm);
  std::cout << schedule::render_grid(s, sim);
  std::cout << fmt::format(
      "\nmakespan {:.3f} (time units of the costs); bubble {:.2f}% of rank "
      "time\npeak in-flight activations per rank (micro-batches of one "
      "stage):",
      sim.makespan, 100.0 * sim.bubble_fraction);
  for (double p : sim.peak_inflight) std::cout << fmt::format(" {:g}", p);
  std::cout << "\n";
  if (show_actions) std::cout << "\n" << s.to_text();
  if (!svg_path.empty()) std::cout << "SVG timeline written to " << svg_path << "\n";
  return 0;
}

}  // namespace trillion::cli
