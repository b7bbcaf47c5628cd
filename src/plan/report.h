// Reports of a plan: the terminal summary (layout, stages, step, where time and memory go,
// run-level answers, failures, runners-up, refusals, assumptions) and a self-contained HTML page,
// page wide, with a memory breakdown chart, a step-time chart, the timeline of one step's
// pipeline schedule on a seconds axis, a runners-up chart and table.
//
// Invariants: reports only format what Plan holds (plus re-simulating the chosen schedule for
// the drawing); numbers carry their units (plan/units.h); every chart has an axis with ticks.
#pragma once

#include <string>

#include "plan/plan.h"

namespace trillion::plan {

std::string format_plan_text(const Plan& plan);
// "tp=8+sp pp=16 ... schedule=interleaved chunks=4 partition=even recompute=selective ...".
std::string layout_text(const Layout& l);
std::string format_plan_html(const Plan& plan);

}  // namespace trillion::plan
