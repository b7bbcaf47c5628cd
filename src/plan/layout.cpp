// See layout.h.
#include "plan/layout.h"

#include <fmt/format.h>

#include <sstream>

#include "core/error.h"

namespace trillion::plan {

std::string recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
  }
  return "?";
}

Recompute parse_recompute(const std::string& name) {
  if (name == "none") return Recompute::kNone;
  if (name == "selective") return Recompute::kSelective;
  if (name == "full") return Recompute::kFull;
  throw Error(fmt::format("unknown recompute policy '{}': use none, selective or full", name));
}

std::string Layout::to_string() const {
  return fmt::format(
      "tp={},pp={},cp={},ep={},dp={},zero={},schedule={},chunks={},recompute={},micro_batch={},"
      "precision={}",
      tp, pp, cp, ep, dp, zero, pp > 1 ? schedule::schedule_kind_name(schedule) : "none", chunks,
      recompute_name(recompute), micro_batch, precision_name(precision));
}

Layout parse_layout(const std::string& text, LayoutFields* fields) {
  Layout l;
  LayoutFields f;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      throw Error(fmt::format("--layout item '{}' is not key=value (e.g. tp=8)", item));
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    auto number = [&](int min) {
      int v = 0;
      try {
        size_t used = 0;
        v = std::stoi(value, &used);
        if (used != value.size()) throw std::invalid_argument(value);
      } catch (const std::exception&) {
        throw Error(fmt::format("--layout {}={}: expected an integer", key, value));
      }
      if (v < min) throw Error(fmt::format("--layout {}={}: must be >= {}", key, value, min));
      return v;
    };
    if (key == "tp")
      l.tp = number(1), f.tp = true;
    else if (key == "pp")
      l.pp = number(1), f.pp = true;
    else if (key == "cp")
      l.cp = number(1), f.cp = true;
    else if (key == "ep")
      l.ep = number(1), f.ep = true;
    else if (key == "dp")
      l.dp = number(1), f.dp = true;
    else if (key == "zero") {
      l.zero = number(0), f.zero = true;
      if (l.zero > 3) throw Error(fmt::format("--layout zero={}: ZeRO stages are 0..3", value));
    } else if (key == "schedule") {
      if (value != "none") l.schedule = schedule::parse_schedule_kind(value);
      f.schedule = true;
    } else if (key == "chunks")
      l.chunks = number(1), f.chunks = true;
    else if (key == "recompute")
      l.recompute = parse_recompute(value), f.recompute = true;
    else if (key == "micro_batch" || key == "mb")
      l.micro_batch = number(1), f.micro_batch = true;
    else if (key == "precision")
      l.precision = parse_precision(value), f.precision = true;
    else
      throw Error(fmt::format(
          "--layout key '{}' is unknown: use tp, pp, cp, ep, dp, zero, schedule, chunks, "
          "recompute, micro_batch, precision",
          key));
  }
  if (fields) *fields = f;
  return l;
}

}  // namespace trillion::plan
