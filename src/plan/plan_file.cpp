// See plan_file.h.
#include "plan/plan_file.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/toml_depth.h"
#include "plan/catalog_files.h"
#include "plan/model_file.h"
#include "plan/report.h"
#include "plan/units.h"

namespace trillion::plan {

PlanFile parse_plan_toml(std::string_view text, std::string_view source) {
  check_toml_key_depth(text, source);
  toml::table root;
  try {
    root = toml::parse(text, std::string(source));
  } catch (const toml::parse_error& e) {
    throw Error(fmt::format("{}: cannot read the plan file: {} (line {})", source, e.description(),
                            e.source().begin.line));
  }
  const toml::table* t = root["plan"].as_table();
  if (!t) throw Error(fmt::format("{}: no [plan] table; see configs/plans/*.toml", source));
  static const std::set<std::string> kKeys = {"name",
                                              "description",
                                              "model",
                                              "cluster",
                                              "gpus",
                                              "seq",
                                              "batch_tokens",
                                              "tokens",
                                              "layout",
                                              "precision",
                                              "published_gpu_hours",
                                              "published_source"};
  for (const auto& [key, node] : *t)
    if (!kKeys.count(std::string(key.str())))
      throw Error(
          fmt::format("{}: unknown key plan.{} (known: name, description, model, cluster, "
                      "gpus, seq, batch_tokens, tokens, layout, precision, "
                      "published_gpu_hours, published_source)",
                      source, key.str()));
  auto text_of = [&](const char* key, bool required) {
    auto v = (*t)[key].value<std::string>();
    if (!v && required) throw Error(fmt::format("{}: [plan] needs {} (a string)", source, key));
    return v.value_or("");
  };
  auto number_of = [&](const char* key, double fallback) {
    if (!t->get(key)) return fallback;
    auto v = (*t)[key].value<double>();
    if (!v || !(*v > 0))
      throw Error(fmt::format("{}: plan.{} must be a positive number", source, key));
    return *v;
  };
  PlanFile f;
  f.name = text_of("name", false);
  if (f.name.empty()) f.name = std::filesystem::path(std::string(source)).stem().string();
  f.description = text_of("description", false);
  f.inputs.model = resolve_model(text_of("model", true));
  f.inputs.gpu = resolve_cluster(text_of("cluster", true));
  // A whole count in 1..most (or absent: 0), checked before the cast (inf would overflow it).
  auto count_of = [&](const char* key, double most) {
    const double v = number_of(key, 0);
    if (v != std::floor(v) || v > most)
      throw Error(fmt::format("{}: plan.{} = {} must be a whole number in 1 to {:.0f}", source,
                              key, v, most));
    return v;
  };
  f.inputs.gpus = static_cast<long>(count_of("gpus", static_cast<double>(kMaxGpus)));
  if (f.inputs.gpus <= 0) throw Error(fmt::format("{}: [plan] needs gpus", source));
  f.inputs.seq_len = static_cast<int64_t>(count_of("seq", static_cast<double>(kMaxSeqLen)));
  f.inputs.batch_tokens = number_of("batch_tokens", 0);
  f.inputs.tokens = number_of("tokens", 0);
  const std::string layout = text_of("layout", false);
  if (!layout.empty())
    f.inputs.search.fixed =
        parse_layout(layout, &f.inputs.search.fields, fmt::format("{}: plan.layout", source));
  const std::string precision = text_of("precision", false);
  if (precision == "any")
    f.inputs.search.precisions = {Precision::kBf16, Precision::kFp16, Precision::kFp8,
                                  Precision::kFp4};
  else if (!precision.empty())
    f.inputs.search.precisions = {parse_precision(precision)};
  f.published_gpu_hours = number_of("published_gpu_hours", 0);
  f.published_source = text_of("published_source", false);
  return f;
}

PlanFile resolve_plan(const std::string& name) {
  const bool is_file = name.find('/') != std::string::npos || name.ends_with(".toml");
  if (is_file) {
    std::ifstream in(name);
    if (!in) throw Error(fmt::format("{}: cannot open the plan file (see configs/plans/)", name));
    std::stringstream text;
    text << in.rdbuf();
    return parse_plan_toml(text.str(), name);
  }
  std::string names;
  for (const CatalogFile& f : catalog_files()) {
    if (!f.path.starts_with("plans/")) continue;
    const std::string stem = std::filesystem::path(std::string(f.path)).stem().string();
    if (stem == name) return parse_plan_toml(f.text, f.path);
    names += (names.empty() ? "" : ", ") + stem;
  }
  throw Error(fmt::format("unknown plan '{}': use one of {} or a plan TOML file", name, names));
}

std::string format_comparison(const PlanFile& a, const Plan& pa, const PlanFile& b,
                              const Plan& pb) {
  auto row = [](const std::string& what, const std::string& x, const std::string& y) {
    return fmt::format("  {:<22} {:<58} {}\n", what, x, y);
  };
  auto published = [](const PlanFile& f) {
    return f.published_gpu_hours > 0
               ? fmt::format("{} ({})", format_count(f.published_gpu_hours), f.published_source)
               : std::string("-");
  };
  std::string out = fmt::format("trillion plan --compare {} {}\n\n", a.name, b.name);
  out += row("", a.name, b.name);
  out +=
      row("model",
          fmt::format("{} ({} / {} activated)", pa.inputs.model.name,
                      format_count(static_cast<double>(count_model(pa.inputs.model).total)),
                      format_count(static_cast<double>(count_model(pa.inputs.model).activated))),
          fmt::format("{} ({} / {} activated)", pb.inputs.model.name,
                      format_count(static_cast<double>(count_model(pb.inputs.model).total)),
                      format_count(static_cast<double>(count_model(pb.inputs.model).activated))));
  out += row("cluster",
             fmt::format("{} x {} (NVLink domain {})", pa.inputs.gpus, pa.inputs.gpu.model,
                         pa.inputs.gpu.nvlink_domain),
             fmt::format("{} x {} (NVLink domain {})", pb.inputs.gpus, pb.inputs.gpu.model,
                         pb.inputs.gpu.nvlink_domain));
  out +=
      row("tokens, batch",
          fmt::format("{}, {} x {}", format_count(pa.run.tokens),
                      format_count(pa.inputs.batch_tokens / pa.inputs.seq_len), pa.inputs.seq_len),
          fmt::format("{}, {} x {}", format_count(pb.run.tokens),
                      format_count(pb.inputs.batch_tokens / pb.inputs.seq_len), pb.inputs.seq_len));
  const Layout& la = pa.best().layout;
  const Layout& lb = pb.best().layout;
  out += row("layout",
             fmt::format("tp={} pp={} cp={} ep={} dp={} zero={}", la.tp, la.pp, la.cp, la.ep, la.dp,
                         la.zero),
             fmt::format("tp={} pp={} cp={} ep={} dp={} zero={}", lb.tp, lb.pp, lb.cp, lb.ep, lb.dp,
                         lb.zero));
  auto sched = [](const Layout& l) {
    return fmt::format("{}{} {} recompute={} mb={}{}",
                       l.pp > 1 ? schedule::schedule_kind_name(l.schedule) : "no pipeline",
                       l.schedule == schedule::ScheduleKind::kInterleaved && l.pp > 1
                           ? fmt::format(" v={}", l.chunks)
                           : "",
                       precision_name(l.precision), l.recompute_text(), l.micro_batch,
                       l.allocation == Allocation::kLive ? " alloc=live" : "");
  };
  out += row("", sched(la), sched(lb));
  const StepBreakdown& sa = pa.best().step;
  const StepBreakdown& sb = pb.best().step;
  out += row("memory per GPU",
             fmt::format("{} of {}", format_bytes(sa.memory.total()),
                         format_bytes(pa.inputs.gpu.hbm_bytes)),
             fmt::format("{} of {}", format_bytes(sb.memory.total()),
                         format_bytes(pb.inputs.gpu.hbm_bytes)));
  out += row("step",
             fmt::format("{} ({} micro-batches, bubble {:.1f}%)", format_seconds(sa.step),
                         sa.microbatches, 100 * sa.bubble_fraction),
             fmt::format("{} ({} micro-batches, bubble {:.1f}%)", format_seconds(sb.step),
                         sb.microbatches, 100 * sb.bubble_fraction));
  out += row("MFU",
             fmt::format("{:.1f}% of {} peak ({:.1f}% of 16-bit)", 100 * sa.mfu,
                         precision_name(la.precision), 100 * sa.mfu_bf16),
             fmt::format("{:.1f}% of {} peak ({:.1f}% of 16-bit)", 100 * sb.mfu,
                         precision_name(lb.precision), 100 * sb.mfu_bf16));
  out +=
      row("days", fmt::format("{:.1f} ({:.1f} without failures)", pa.run.days, pa.run.ideal_days),
          fmt::format("{:.1f} ({:.1f} without failures)", pb.run.days, pb.run.ideal_days));
  out += row("GPU-hours", format_count(pa.run.gpu_hours), format_count(pb.run.gpu_hours));
  out += row("  published", published(a), published(b));
  out += row("cost",
             fmt::format("{} at ${:.2f}/GPU-hour", format_usd(pa.run.cost_usd),
                         pa.inputs.gpu.usd_per_gpu_hour),
             fmt::format("{} at ${:.2f}/GPU-hour", format_usd(pb.run.cost_usd),
                         pb.inputs.gpu.usd_per_gpu_hour));
  out += row("failures",
             fmt::format("{:.0f} interruptions, goodput {:.1f}%",
                         pa.run.failures.expected_interruptions, 100 * pa.run.failures.goodput),
             fmt::format("{:.0f} interruptions, goodput {:.1f}%",
                         pb.run.failures.expected_interruptions, 100 * pb.run.failures.goodput));
  out += fmt::format("\nGPU-hours {} / {}: {:.2f}x predicted", a.name, b.name,
                     pa.run.gpu_hours / pb.run.gpu_hours);
  if (a.published_gpu_hours > 0 && b.published_gpu_hours > 0)
    out += fmt::format(", {:.2f}x published", a.published_gpu_hours / b.published_gpu_hours);
  out += "\n";
  return out;
}

}  // namespace trillion::plan
