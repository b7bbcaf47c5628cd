// See report.h.
#include "plan/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "schedule/generators.h"
#include "schedule/render.h"
#include "schedule/simulator.h"

namespace trillion::plan {
namespace {

using Parts = std::vector<std::pair<std::string, double>>;

Parts time_parts(const StepBreakdown& s) {
  return {{"compute", s.compute - s.recompute},
          {"recompute", s.recompute},
          {"TP/SP comm", s.tp_comm},
          {"CP comm", s.cp_comm},
          {"EP all-to-all", s.ep_comm},
          {"pipeline bubble", s.bubble},
          {"DP/ZeRO comm", s.dp_comm},
          {"optimizer", s.optimizer}};
}

Parts memory_parts(const MemoryBreakdown& m) {
  return {{"weights", m.weights},         {"gradients", m.gradients}, {"optimizer", m.optimizer},
          {"activations", m.activations}, {"temporary", m.temporary}, {"overhead", m.overhead}};
}

std::string layout_line(const Layout& l) {
  return fmt::format(
      "tp={} pp={} cp={} ep={} dp={} zero={} schedule={} chunks={} recompute={} "
      "micro_batch={} {}",
      l.tp, l.pp, l.cp, l.ep, l.dp, l.zero,
      l.pp > 1 ? schedule::schedule_kind_name(l.schedule) : "none", l.chunks,
      recompute_name(l.recompute), l.micro_batch, precision_name(l.precision));
}

std::string header(const Plan& p) {
  const ModelCounts c = count_model(p.inputs.model);
  return fmt::format("{} ({:.0f}B parameters, {:.1f}B activated per token) on {} x {}",
                     p.inputs.model.name, c.total / 1e9, c.activated / 1e9, p.inputs.gpus,
                     p.inputs.gpu.model);
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '<')
      out += "&lt;";
    else if (ch == '>')
      out += "&gt;";
    else if (ch == '&')
      out += "&amp;";
    else
      out += ch;
  }
  return out;
}

// A horizontal stacked bar with a legend; total_mark draws a limit line (HBM size).
std::string stacked_bar_svg(const Parts& parts, double scale_max, const std::string& unit,
                            double unit_div, double total_mark) {
  static const char* kColours[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                   "#59a14f", "#edc948", "#b07aa1", "#9c755f"};
  const double width = 900, bar_h = 36;
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n",
      width + 20, bar_h + 30 + 18 * parts.size());
  double x = 10;
  size_t i = 0;
  for (const auto& [name, value] : parts) {
    const double w = std::max(0.0, value / scale_max * width);
    out += fmt::format(
        "<rect x=\"{:.1f}\" y=\"10\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\"><title>{}: "
        "{:.2f} {}</title></rect>\n",
        x, w, bar_h, kColours[i % 8], name, value / unit_div, unit);
    out += fmt::format(
        "<rect x=\"10\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"28\" "
        "y=\"{}\">{}: {:.2f} {}</text>\n",
        bar_h + 20 + 18 * i, kColours[i % 8], bar_h + 31 + 18 * i, name, value / unit_div, unit);
    x += w;
    ++i;
  }
  if (total_mark > 0) {
    const double mx = 10 + total_mark / scale_max * width;
    out += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"4\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"#000\" "
        "stroke-dasharray=\"4,3\"/><text x=\"{:.1f}\" y=\"{}\" text-anchor=\"end\">limit "
        "{:.0f} {}</text>\n",
        mx, mx, bar_h + 16, mx - 4, bar_h + 30 + 18 * parts.size() - 4, total_mark / unit_div,
        unit);
  }
  return out + "</svg>\n";
}

}  // namespace

std::string format_plan_text(const Plan& p) {
  const Candidate& best = p.best();
  const StepBreakdown& s = best.step;
  const RunEstimate& r = p.run;
  std::string out = fmt::format("trillion plan: {}\n", header(p));
  out += fmt::format("  seq {}, batch {:.2f}M tokens per step, {:.2f}T training tokens{}\n\n",
                     p.inputs.seq_len, p.inputs.batch_tokens / 1e6, r.tokens / 1e12,
                     r.chinchilla_tokens ? " (Chinchilla-optimal)" : "");
  out += fmt::format("Layout    {}\n", layout_line(best.layout));
  out += fmt::format(
      "Step      {:.2f} s, {} micro-batches per pipeline, {:.0f} tokens/s; MFU {:.1f}% of {} peak "
      "({:.1f}% of BF16 peak; PaLM full-attention count {:.1f}%), HFU {:.1f}%\n",
      s.step, s.microbatches, s.tokens_per_second, 100 * s.mfu,
      precision_name(best.layout.precision), 100 * s.mfu_bf16, 100 * s.mfu_palm, 100 * s.hfu);
  out += "          time:";
  for (const auto& [name, v] : time_parts(s))
    if (v > 0) out += fmt::format(" {} {:.1f}%,", name, 100 * v / s.step);
  out.back() = '\n';
  out += fmt::format("Memory    {:.1f} GB per GPU of {:.0f} GB:", s.memory.total() / 1e9,
                     p.inputs.gpu.hbm_bytes / 1e9);
  for (const auto& [name, v] : memory_parts(s.memory))
    out += fmt::format(" {} {:.1f},", name, v / 1e9);
  out.back() = '\n';
  out += fmt::format(
      "Run       {:.3g} FLOPs (6ND {:.3g}); {:.1f} days ideal, {:.1f} days with failures; "
      "{:.3g} GPU-hours; ${:.3g}\n",
      r.flops_exact, r.flops_6nd, r.ideal_days, r.days, r.gpu_hours, r.cost_usd);
  out += fmt::format(
      "Failures  cluster MTBF {:.2f} h; {:.0f} interruptions expected; checkpoint {:.2f} GB/GPU "
      "({:.1f} s) every {:.1f} min (Daly); goodput {:.1f}%\n",
      r.failures.mtbf_seconds / 3600, r.failures.expected_interruptions,
      r.checkpoint_bytes_per_gpu / 1e9, r.checkpoint_seconds, r.failures.checkpoint_interval / 60,
      100 * r.failures.goodput);
  out += "\nThe plan (#1) and its runners-up:\n";
  out += fmt::format("  {:>2}  {:<100} {:>8} {:>7} {:>6} {:>7} {:>7}\n", "#", "layout", "step s",
                     "vs #1", "MFU", "mem GB", "bubble");
  for (size_t i = 0; i < p.search.ranked.size(); ++i) {
    const Candidate& c = p.search.ranked[i];
    out += fmt::format("  {:>2}  {:<100} {:>8.2f} {:>+6.1f}% {:>5.1f}% {:>7.1f} {:>6.1f}%\n", i + 1,
                       layout_line(c.layout), c.step.step, 100 * (c.step.step / s.step - 1),
                       100 * c.step.mfu, c.step.memory.total() / 1e9, 100 * c.step.bubble_fraction);
  }
  out += "\nAssumptions:\n";
  for (const auto& [name, how] : p.assumptions) out += fmt::format("  {}: {}\n", name, how);
  out += fmt::format("\nSearched {} layouts, {} fit in memory, {} schedule simulations.\n",
                     p.search.shapes, p.search.fitting, p.search.simulations);
  return out;
}

std::string format_plan_html(const Plan& p) {
  const Candidate& best = p.best();
  const StepBreakdown& s = best.step;
  const RunEstimate& r = p.run;
  std::string out =
      "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>trillion plan</title>\n"
      "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
      "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;"
      "font-size:13px}th{background:#eee}code{font-size:13px}</style></head><body>\n";
  out += fmt::format("<h1>trillion plan</h1>\n<p>{}</p>\n", html_escape(header(p)));
  out += fmt::format("<h2>Layout</h2>\n<p><code>{}</code></p>\n", layout_line(best.layout));
  out +=
      "<table><tr><th>step</th><th>MFU</th><th>HFU</th><th>memory / GPU</th><th>days</th>"
      "<th>GPU-hours</th><th>cost</th><th>interruptions</th><th>goodput</th></tr>\n";
  out += fmt::format(
      "<tr><td>{:.2f} s</td><td>{:.1f}%</td><td>{:.1f}%</td><td>{:.1f} GB</td><td>{:.1f}</td>"
      "<td>{:.3g}</td><td>${:.3g}</td><td>{:.0f}</td><td>{:.1f}%</td></tr></table>\n",
      s.step, 100 * s.mfu, 100 * s.hfu, s.memory.total() / 1e9, r.days, r.gpu_hours, r.cost_usd,
      r.failures.expected_interruptions, 100 * r.failures.goodput);
  out += "<h2>Memory per GPU</h2>\n";
  out += stacked_bar_svg(memory_parts(s.memory), std::max(s.memory.total(), p.inputs.gpu.hbm_bytes),
                         "GB", 1e9, p.inputs.gpu.hbm_bytes);
  out += "<h2>Where a step's time goes</h2>\n";
  out += stacked_bar_svg(time_parts(s), s.step, "s", 1.0, 0);
  if (best.layout.pp > 1) {
    // The chosen schedule with this plan's stage costs. Long steps are drawn with fewer
    // micro-batches (same p, v and costs) so the page stays small; the caption says so.
    const int v = best.layout.schedule == schedule::ScheduleKind::kInterleaved ? best.layout.chunks
                  : best.layout.schedule == schedule::ScheduleKind::kDualPipe  ? 2
                                                                               : 1;
    int m = s.microbatches;
    const int cap = std::max(4 * best.layout.pp, 16);
    bool reduced = false;
    if (m > cap) {
      int mm = cap - cap % best.layout.pp;
      if (best.layout.schedule == schedule::ScheduleKind::kDualPipe) mm += mm % 2;
      m = std::max(mm, best.layout.pp);
      reduced = true;
    }
    const schedule::OpCosts costs{s.stage_forward, s.stage_backward_input, s.stage_backward_weight,
                                  s.p2p};
    const schedule::Schedule sched =
        schedule::generate_schedule(best.layout.schedule, best.layout.pp, m, v, costs);
    const schedule::Simulation sim = schedule::simulate(sched, costs);
    out += "<h2>Timeline of one step (pipeline ranks across, time along)</h2>\n";
    if (reduced)
      out += fmt::format(
          "<p>Drawn with {} of the step's {} micro-batches; the bubble of the "
          "full step is {:.1f}%.</p>\n",
          m, s.microbatches, 100 * s.bubble_fraction);
    out += schedule::render_svg(sched, sim);
  }
  out +=
      "<h2>Runners-up</h2>\n<table><tr><th>#</th><th>layout</th><th>step s</th><th>MFU</th>"
      "<th>memory GB</th><th>bubble</th><th>TP s</th><th>EP s</th><th>DP s</th></tr>\n";
  for (size_t i = 0; i < p.search.ranked.size(); ++i) {
    const Candidate& c = p.search.ranked[i];
    out += fmt::format(
        "<tr><td>{}</td><td><code>{}</code></td><td>{:.2f}</td><td>{:.1f}%</td><td>{:.1f}</td>"
        "<td>{:.1f}%</td><td>{:.2f}</td><td>{:.2f}</td><td>{:.2f}</td></tr>\n",
        i + 1, layout_line(c.layout), c.step.step, 100 * c.step.mfu, c.step.memory.total() / 1e9,
        100 * c.step.bubble_fraction, c.step.tp_comm, c.step.ep_comm, c.step.dp_comm);
  }
  out += "</table>\n<h2>Run</h2>\n<ul>\n";
  out +=
      fmt::format("<li>{:.3g} training tokens{}; {:.3g} FLOPs (6ND: {:.3g})</li>\n", r.tokens,
                  r.chinchilla_tokens ? " (Chinchilla-optimal)" : "", r.flops_exact, r.flops_6nd);
  out += fmt::format("<li>{:.1f} days without failures, {:.1f} days with them</li>\n", r.ideal_days,
                     r.days);
  out += fmt::format(
      "<li>cluster MTBF {:.2f} h; checkpoint {:.2f} GB per GPU every {:.1f} min; lost to "
      "checkpoints {:.1f} h, to rework {:.1f} h, to restarts {:.1f} h</li>\n</ul>\n",
      r.failures.mtbf_seconds / 3600, r.checkpoint_bytes_per_gpu / 1e9,
      r.failures.checkpoint_interval / 60, r.failures.checkpoint_overhead / 3600,
      r.failures.rework_overhead / 3600, r.failures.restart_overhead / 3600);
  out += "<h2>Assumptions</h2>\n<ul>\n";
  for (const auto& [name, how] : p.assumptions)
    out += fmt::format("<li><b>{}</b>: {}</li>\n", html_escape(name), html_escape(how));
  out += "</ul>\n</body></html>\n";
  return out;
}

}  // namespace trillion::plan
