// Reports of a plan: the terminal summary (layout, step, where time and memory go, run-level
// answers, failures, runners-up, assumptions) and a self-contained HTML page with a memory
// breakdown chart, a step-time chart, the timeline of one step's pipeline schedule and the
// runners-up table.
//
// Invariants: reports only format what Plan holds (plus re-simulating the chosen schedule for
// the drawing); numbers carry their units.
#pragma once

#include <string>

#include "plan/plan.h"

namespace trillion::plan {

std::string format_plan_text(const Plan& plan);
std::string format_plan_html(const Plan& plan);

}  // namespace trillion::plan
