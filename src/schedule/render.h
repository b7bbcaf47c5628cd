// Drawings of a simulated schedule: a rank x time grid for the terminal and an SVG timeline
// (F/B/W coloured, one shade per chunk, idle time left as a visible red band).
//
// Invariants: drawings read only the Simulation (they never re-run anything); the grid's cell
// is the smallest compute duration, so unequal costs stretch actions over several cells.
#pragma once

#include <string>

#include "schedule/simulator.h"

namespace trillion::schedule {

// One row per rank; each cell shows the action occupying it ("F3", "b12" for chunk 1 shown in
// lower case, "." for idle). At most max_cells columns; longer schedules are cut with a note.
std::string render_grid(const Schedule& schedule, const Simulation& sim, int max_cells = 160);

std::string render_svg(const Schedule& schedule, const Simulation& sim);

}  // namespace trillion::schedule
