// `trillion report`: one self-contained HTML page (inline SVG and CSS, no script, no network) for
// one or more run directories: a line plot per numeric metric of metrics.jsonl (nested objects
// flattened to dotted names, e.g. memory.activations), runs overlaid in distinct colours, with x
// (step) and y axes whose ticks span exactly the data's range; then each run's summary.json,
// events.log and resolved config.toml. Invariant: every plot's axis range is [min, max] of the
// values drawn (a constant series gets [v - 1, v + 1]), written as data-x-min/max and
// data-y-min/max attributes on its <svg> so tests and tools read them back.
#pragma once

#include <string>
#include <vector>

namespace trillion::interop {

std::string run_report_html(const std::vector<std::string>& run_dirs);

}  // namespace trillion::interop
