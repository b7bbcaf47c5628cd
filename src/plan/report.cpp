// See report.h.
#include "plan/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "plan/model_file.h"
#include "plan/units.h"
#include "schedule/generators.h"
#include "schedule/simulator.h"

namespace trillion::plan {
namespace {

using Parts = std::vector<std::pair<std::string, double>>;

const char* kColours[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                          "#59a14f", "#edc948", "#b07aa1", "#9c755f"};

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

std::string header(const Plan& p) {
  const ModelCounts c = count_model(p.inputs.model);
  // DeepSeek-V3's way: the main model, then its MTP modules (671B + 14B).
  const std::string total =
      c.mtp > 0 ? fmt::format("{} + {} MTP", format_count(static_cast<double>(c.total - c.mtp)),
                              format_count(static_cast<double>(c.mtp)))
                : format_count(static_cast<double>(c.total));
  return fmt::format("{} ({} parameters, {} activated per token) on {} x {}", p.inputs.model.name,
                     total, format_count(static_cast<double>(c.activated)), p.inputs.gpus,
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

// A "nice" tick step (1, 2 or 5 x 10^k) giving about `ticks` ticks up to max.
double tick_step(double max, int ticks) {
  if (!(max > 0)) return 1;
  const double raw = max / ticks, mag = std::pow(10, std::floor(std::log10(raw)));
  for (double f : {1.0, 2.0, 5.0, 10.0})
    if (f * mag >= raw) return f * mag;
  return 10 * mag;
}

std::string tick_label(double v, double step) {
  return step >= 1     ? fmt::format("{:.0f}", v)
         : step >= 0.1 ? fmt::format("{:.1f}", v)
                       : fmt::format("{:.2f}", v);
}

// An x axis from 0 to max at [x0, x0 + width] on line y, ticks every "nice" step, with a title.
std::string x_axis(double x0, double width, double y, double max, const std::string& unit) {
  const double step = tick_step(max, 8);
  std::string out = fmt::format(
      "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#333\"/>\n", x0, y,
      x0 + width, y);
  for (double v = 0; v <= max * (1 + 1e-9); v += step) {
    const double x = x0 + v / max * width;
    out += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#333\"/>"
        "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4}</text>\n",
        x, y, y + 5, y + 17, tick_label(v, step));
  }
  out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
                     x0 + width / 2, y + 32, unit);
  return out;
}

constexpr double kWidth = 1000;  // every chart is the page's width

// A horizontal stacked bar with a legend and an x axis; limit draws a dashed line (HBM size).
std::string stacked_bar_svg(const Parts& parts, double unit_div, const std::string& unit,
                            double limit) {
  double total = 0;
  for (const auto& part : parts) total += part.second;
  const double max = std::max(total, limit) * 1.02 / unit_div;
  const double x0 = 10, plot = kWidth - 30, bar_h = 34;
  const double legend_y = bar_h + 70;
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {0:.0f} {1:.0f}\" width=\"100%\" "
      "style=\"max-width:{0:.0f}px\" font-family=\"sans-serif\" font-size=\"12\">\n",
      kWidth, legend_y + 18 * ((parts.size() + 1) / 2) + 10);
  double x = x0;
  size_t i = 0;
  for (const auto& [name, value] : parts) {
    const double w = std::max(0.0, value / unit_div / max * plot);
    out += fmt::format(
        "<rect x=\"{:.1f}\" y=\"10\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\"><title>{}: "
        "{:.2f} {}</title></rect>\n",
        x, w, bar_h, kColours[i % 8], name, value / unit_div, unit);
    const double lx = x0 + (i % 2) * plot / 2, ly = legend_y + 18 * (i / 2);
    out += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"12\" height=\"12\" fill=\"{}\"/><text "
        "x=\"{:.1f}\" y=\"{:.1f}\">{}: {:.2f} {} ({:.1f}%)</text>\n",
        lx, ly - 10, kColours[i % 8], lx + 18, ly, name, value / unit_div, unit,
        total > 0 ? 100 * value / total : 0.0);
    x += w;
    ++i;
  }
  if (limit > 0) {
    const double mx = x0 + limit / unit_div / max * plot;
    out += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"4\" x2=\"{0:.1f}\" y2=\"{1}\" stroke=\"#000\" "
        "stroke-dasharray=\"4,3\"/><text x=\"{2:.1f}\" y=\"{3}\" text-anchor=\"end\">HBM "
        "{4:.0f} {5}</text>\n",
        mx, bar_h + 16, mx - 4, 8, limit / unit_div, unit);
  }
  out += x_axis(x0, plot, bar_h + 16, max, unit);
  return out + "</svg>\n";
}

// The runners-up as bars of their step time, stacked by where it goes, on one seconds axis.
std::string runners_up_svg(const Plan& p) {
  const auto& ranked = p.search.ranked;
  double max = 0;
  for (const Candidate& c : ranked) max = std::max(max, c.step.step);
  max *= 1.02;
  const double x0 = 40, plot = kWidth - 210, row = 24;  // room on the right for the labels
  const double axis_y = 10 + row * ranked.size();
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {0:.0f} {1:.0f}\" width=\"100%\" "
      "style=\"max-width:{0:.0f}px\" font-family=\"sans-serif\" font-size=\"12\">\n",
      kWidth, axis_y + 60);
  for (size_t i = 0; i < ranked.size(); ++i) {
    const StepBreakdown& s = ranked[i].step;
    const double y = 10 + row * i;
    out += fmt::format("<text x=\"4\" y=\"{:.1f}\">#{}</text>\n", y + 15, i + 1);
    double x = x0;
    size_t k = 0;
    for (const auto& [name, value] : time_parts(s)) {
      const double w = std::max(0.0, value / max * plot);
      out += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\"><title>#{} "
          "{}: {:.2f} s</title></rect>\n",
          x, y, w, row - 6, kColours[k % 8], i + 1, name, value);
      x += w;
      ++k;
    }
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{:.2f} s, MFU {:.1f}%</text>\n", x + 4,
                       y + 14, s.step, 100 * s.mfu);
  }
  out += x_axis(x0, plot, axis_y, max, "seconds per step (colours as in the step-time chart)");
  return out + "</svg>\n";
}

// The pipeline timeline on a seconds axis, page width: one row per rank, F/B/W coloured, idle
// time left blank.
std::string timeline_svg(const schedule::Schedule& sched, const schedule::Simulation& sim) {
  const double x0 = 60, plot = kWidth - 80;
  const int ranks = sched.num_ranks;
  const double row = std::clamp(420.0 / ranks, 6.0, 24.0);
  const double axis_y = 10 + row * ranks + 4;
  const double max = sim.makespan;
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {0:.0f} {1:.0f}\" width=\"100%\" "
      "style=\"max-width:{0:.0f}px\" font-family=\"sans-serif\" font-size=\"11\">\n",
      kWidth, axis_y + 64);
  static const char* kLight[] = {"#6baed6", "#74c476", "#fdae6b"};
  static const char* kDark[] = {"#2171b5", "#238b45", "#d94801"};
  for (int r = 0; r < ranks; ++r) {
    const double y = 10 + row * r;
    if (ranks <= 32 || r % (ranks / 16) == 0)
      out += fmt::format("<text x=\"4\" y=\"{:.1f}\">rank {}</text>\n", y + row * 0.75, r);
    out += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"#f4c7c3\"/>\n",
        x0, y, plot, row - 1);
    for (const schedule::TimedAction& t : sim.timeline[r]) {
      if (!schedule::is_compute(t.action.kind) || t.end <= t.start) continue;
      const int k = static_cast<int>(t.action.kind);
      out += fmt::format(
          "<rect x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.1f}\" "
          "fill=\"{}\"><title>{} "
          "{:.3f}-{:.3f} s</title></rect>\n",
          x0 + t.start / max * plot, y, (t.end - t.start) / max * plot, row - 1,
          t.action.chunk % 2 == 1 ? kDark[k] : kLight[k], schedule::to_string(t.action), t.start,
          t.end);
    }
  }
  out += x_axis(x0, plot, axis_y, max, "seconds");
  const double ly = axis_y + 50;
  out += fmt::format(
      "<rect x=\"{0:.0f}\" y=\"{1:.0f}\" width=\"12\" height=\"12\" fill=\"#6baed6\"/><text "
      "x=\"{2:.0f}\" y=\"{3:.0f}\">F (forward)</text><rect x=\"{4:.0f}\" y=\"{1:.0f}\" "
      "width=\"12\" "
      "height=\"12\" fill=\"#74c476\"/><text x=\"{5:.0f}\" y=\"{3:.0f}\">B (input gradient, with "
      "recompute)</text><rect x=\"{6:.0f}\" y=\"{1:.0f}\" width=\"12\" height=\"12\" "
      "fill=\"#fdae6b\"/><text x=\"{7:.0f}\" y=\"{3:.0f}\">W (weight gradient); darker: odd "
      "chunks; pink: idle</text>\n",
      x0, ly - 10, x0 + 16, ly, x0 + 120, x0 + 136, x0 + 400, x0 + 416);
  return out + "</svg>\n";
}

std::string layout_words(const Layout& l) {
  std::string s =
      fmt::format("tp={}{} pp={} cp={} ep={} dp={} zero={}", l.tp,
                  l.tp > 1 ? (l.sp ? "+sp" : " (no sp)") : "", l.pp, l.cp, l.ep, l.dp, l.zero);
  if (l.pp > 1) {
    s += fmt::format(" schedule={}", schedule::schedule_kind_name(l.schedule));
    if (l.schedule == schedule::ScheduleKind::kInterleaved)
      s += fmt::format(" chunks={}", l.chunks);
    s += fmt::format(" partition={}", l.partition_text());
  }
  s += fmt::format(" recompute={} micro_batch={} {} grad={}", l.recompute_text(), l.micro_batch,
                   precision_name(l.precision), l.grad_bytes == 4 ? "fp32" : "bf16");
  if (l.moment_bytes != 4) s += " moments=bf16";
  if (l.allocation != Allocation::kSlots) s += " alloc=live";
  if (l.fp8_activations()) s += " act=fp8";
  if (l.ema != Ema::kNone) s += " ema=" + ema_name(l.ema);
  return s;
}

std::string stage_words(const ModelSpec& m, const Layout& l) {
  const PipelineShape shape = pipeline_shape(m, l);
  if (l.pp == 1) return fmt::format("all {} layers and the head on one stage", m.n_layers);
  std::string counts;
  const size_t n = shape.stage_layers.size();
  for (size_t i = 0; i < n; ++i) {
    if (n > 12 && i == 6) {
      counts += " ...";
      i = n - 4;
    }
    counts += fmt::format("{}{}", i == 0 ? "" : " ", shape.stage_layers[i]);
  }
  const bool alone = shape.stage_layers.front() == 0 || shape.stage_layers.back() == 0;
  return fmt::format(
      "{} stages of {} layers (embedding on the first, head on the last{}); "
      "the busiest rank holds {}",
      n, counts, alone ? "; 0: that unit alone" : "", shape.max_rank_layers());
}

}  // namespace

std::string layout_text(const Layout& l) {
  return layout_words(l);
}

std::string format_plan_text(const Plan& p) {
  const Candidate& best = p.best();
  const StepBreakdown& s = best.step;
  const RunEstimate& r = p.run;
  std::string out = fmt::format("trillion plan: {}\n", header(p));
  out += fmt::format("  {}\n", describe_block(p.inputs.model));
  out += fmt::format("  seq {}, batch {} tokens per step, {} training tokens{}\n\n",
                     p.inputs.seq_len, format_count(p.inputs.batch_tokens), format_count(r.tokens),
                     r.chinchilla_tokens ? " (Chinchilla-optimal)" : "");
  out += fmt::format("Layout    {}\n", layout_words(best.layout));
  out += fmt::format("Stages    {}\n", stage_words(p.inputs.model, best.layout));
  out += fmt::format(
      "Step      {}, {} micro-batches per pipeline, {} tokens/s; MFU {:.1f}% of {} peak "
      "({:.1f}% of the 16-bit peak; PaLM full-attention count {:.1f}%), HFU {:.1f}%\n",
      format_seconds(s.step), s.microbatches, format_count(s.tokens_per_second), 100 * s.mfu,
      precision_name(best.layout.precision), 100 * s.mfu_bf16, 100 * s.mfu_palm, 100 * s.hfu);
  out += "          time:";
  for (const auto& [name, v] : time_parts(s))
    if (v > 0) out += fmt::format(" {} {:.1f}%,", name, 100 * v / s.step);
  out.back() = '\n';
  out += fmt::format(
      "Memory    {} per GPU of {} (pipeline rank {}, the fullest):", format_bytes(s.memory.total()),
      format_bytes(p.inputs.gpu.hbm_bytes), s.memory.rank);
  for (const auto& [name, v] : memory_parts(s.memory))
    out += fmt::format(" {} {},", name, format_bytes(v));
  out.back() = '\n';
  out += fmt::format("Run       {} FLOPs (6ND {}); {} ideal, {} with failures; {} GPU-hours; {}\n",
                     format_flops(r.flops_exact), format_flops(r.flops_6nd),
                     format_seconds(r.ideal_days * 86400), format_seconds(r.days * 86400),
                     format_count(r.gpu_hours), format_usd(r.cost_usd));
  out += fmt::format(
      "Failures  cluster MTBF {}; {:.0f} interruptions expected; checkpoint {}/GPU ({}) every {} "
      "(Daly); goodput {:.1f}%\n",
      format_seconds(r.failures.mtbf_seconds), r.failures.expected_interruptions,
      format_bytes(r.checkpoint_bytes_per_gpu), format_seconds(r.checkpoint_seconds),
      format_seconds(r.failures.checkpoint_interval), 100 * r.failures.goodput);
  if (p.inputs.host_repair_seconds > 0) {
    out += fmt::format(
        "          a failed host is out {}: {} lost per failure ({}), {} in all\n",
        format_seconds(p.inputs.host_repair_seconds), format_seconds(r.failures.lost_per_failure),
        r.failures.elastic ? fmt::format("elastic at dp {} of {} until it is back, then a restart",
                                         r.elastic_dp, p.best().layout.dp)
                           : "waiting for it",
        format_seconds(r.failures.repair_overhead));
  }
  out += "\nThe plan (#1) and its runners-up:\n";
  out += fmt::format("  {:>2}  {:<118} {:>9} {:>7} {:>6} {:>9} {:>7}\n", "#", "layout", "step",
                     "vs #1", "MFU", "memory", "bubble");
  for (size_t i = 0; i < p.search.ranked.size(); ++i) {
    const Candidate& c = p.search.ranked[i];
    out += fmt::format("  {:>2}  {:<118} {:>9} {:>+6.1f}% {:>5.1f}% {:>9} {:>6.1f}%\n", i + 1,
                       layout_words(c.layout), format_seconds(c.step.step),
                       100 * (c.step.step / s.step - 1), 100 * c.step.mfu,
                       format_bytes(c.step.memory.total()), 100 * c.step.bubble_fraction);
  }
  if (!p.search.refusals.empty()) {
    out += "\nRefused:\n";
    for (const Refusal& rf : p.search.refusals)
      out += fmt::format("  {:>7} {} (e.g. {})\n", rf.count, rf.reason, rf.example);
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
      "<style>body{font-family:sans-serif;max-width:1040px;margin:2em auto;padding:0 1em}"
      "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;"
      "font-size:13px}th{background:#eee}code{font-size:12px;overflow-wrap:anywhere}"
      "svg{display:block}li{overflow-wrap:anywhere}</style>"
      "</head><body>\n";
  out += fmt::format("<h1>trillion plan</h1>\n<p>{}<br>{}</p>\n", html_escape(header(p)),
                     html_escape(describe_block(p.inputs.model)));
  out += fmt::format("<h2>Layout</h2>\n<p><code>{}</code><br>{}</p>\n",
                     html_escape(layout_words(best.layout)),
                     html_escape(stage_words(p.inputs.model, best.layout)));
  out +=
      "<table><tr><th>step</th><th>MFU</th><th>HFU</th><th>memory / GPU</th><th>days</th>"
      "<th>GPU-hours</th><th>cost</th><th>interruptions</th><th>goodput</th></tr>\n";
  out += fmt::format(
      "<tr><td>{}</td><td>{:.1f}%</td><td>{:.1f}%</td><td>{}</td><td>{:.1f}</td>"
      "<td>{}</td><td>{}</td><td>{:.0f}</td><td>{:.1f}%</td></tr></table>\n",
      format_seconds(s.step), 100 * s.mfu, 100 * s.hfu, format_bytes(s.memory.total()), r.days,
      format_count(r.gpu_hours), format_usd(r.cost_usd), r.failures.expected_interruptions,
      100 * r.failures.goodput);
  out += fmt::format("<h2>Memory per GPU (pipeline rank {}, the fullest)</h2>\n", s.memory.rank);
  out += stacked_bar_svg(memory_parts(s.memory), 1e9, "GB", p.inputs.gpu.hbm_bytes);
  out += "<h2>Where a step's time goes</h2>\n";
  out += stacked_bar_svg(time_parts(s), 1.0, "s", 0);
  if (best.layout.pp > 1) {
    // The chosen schedule with this plan's stage costs in seconds. Long steps are drawn with
    // fewer micro-batches (same p, v and costs) so the page stays readable; the caption says how
    // that changes the bubble.
    const int v = pipeline_shape(p.inputs.model, best.layout).chunks;
    int m = s.microbatches;
    const int cap = std::max(4 * best.layout.pp, 16);
    bool reduced = false;
    if (m > cap) {
      int mm = cap - cap % best.layout.pp;
      if (best.layout.schedule == schedule::ScheduleKind::kDualPipe) mm += mm % 2;
      m = std::max(mm, best.layout.schedule == schedule::ScheduleKind::kDualPipe
                           ? 2 * best.layout.pp
                           : best.layout.pp);
      reduced = true;
    }
    const schedule::OpCosts costs{s.stage_forward, s.stage_backward_input, s.stage_backward_weight,
                                  s.p2p};
    const schedule::Schedule sched =
        schedule::generate_schedule(best.layout.schedule, best.layout.pp, m, v, costs);
    const schedule::Simulation sim = schedule::simulate(sched, costs);
    out += "<h2>Timeline of one step (pipeline ranks down, time across)</h2>\n";
    if (reduced)
      out += fmt::format(
          "<p>Drawn with {} of the step's {} micro-batches: its bubble is {:.1f}%. The full step "
          "has the same ramp-up and ramp-down idle time spread over {} micro-batches, so its "
          "bubble is {:.1f}%.</p>\n",
          m, s.microbatches, 100 * sim.bubble_fraction, s.microbatches, 100 * s.bubble_fraction);
    else
      out += fmt::format("<p>Bubble {:.1f}% of rank time (the step's).</p>\n",
                         100 * sim.bubble_fraction);
    out += timeline_svg(sched, sim);
  }
  out += "<h2>Runners-up</h2>\n";
  out += runners_up_svg(p);
  out +=
      "<table><tr><th>#</th><th>layout</th><th>step</th><th>MFU</th>"
      "<th>memory</th><th>bubble</th><th>TP</th><th>EP</th><th>DP</th></tr>\n";
  for (size_t i = 0; i < p.search.ranked.size(); ++i) {
    const Candidate& c = p.search.ranked[i];
    out += fmt::format(
        "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{:.1f}%</td><td>{}</td>"
        "<td>{:.1f}%</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
        i + 1, html_escape(layout_words(c.layout)), format_seconds(c.step.step), 100 * c.step.mfu,
        format_bytes(c.step.memory.total()), 100 * c.step.bubble_fraction,
        format_seconds(c.step.tp_comm), format_seconds(c.step.ep_comm),
        format_seconds(c.step.dp_comm));
  }
  out += "</table>\n<h2>Run</h2>\n<ul>\n";
  out += fmt::format("<li>{} training tokens{}; {} FLOPs (6ND: {})</li>\n", format_count(r.tokens),
                     r.chinchilla_tokens ? " (Chinchilla-optimal)" : "",
                     format_flops(r.flops_exact), format_flops(r.flops_6nd));
  out += fmt::format("<li>{} without failures, {} with them; {} GPU-hours, {}</li>\n",
                     format_seconds(r.ideal_days * 86400), format_seconds(r.days * 86400),
                     format_count(r.gpu_hours), format_usd(r.cost_usd));
  out += fmt::format(
      "<li>cluster MTBF {}; checkpoint {} per GPU every {}; lost to checkpoints {}, to rework {}, "
      "to restarts {}</li>\n</ul>\n",
      format_seconds(r.failures.mtbf_seconds), format_bytes(r.checkpoint_bytes_per_gpu),
      format_seconds(r.failures.checkpoint_interval),
      format_seconds(r.failures.checkpoint_overhead), format_seconds(r.failures.rework_overhead),
      format_seconds(r.failures.restart_overhead));
  if (!p.search.refusals.empty()) {
    out += "<h2>Refused layouts</h2>\n<ul>\n";
    for (const Refusal& rf : p.search.refusals)
      out += fmt::format("<li>{}: {} (e.g. <code>{}</code>)</li>\n", rf.count,
                         html_escape(rf.reason), html_escape(rf.example));
    out += "</ul>\n";
  }
  out += "<h2>Assumptions</h2>\n<ul>\n";
  for (const auto& [name, how] : p.assumptions)
    out += fmt::format("<li><b>{}</b>: {}</li>\n", html_escape(name), html_escape(how));
  out += "</ul>\n</body></html>\n";
  return out;
}

}  // namespace trillion::plan
