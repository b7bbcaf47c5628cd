// How the run's process groups communicate, from its config: parallel.allreduce and
// parallel.ranks_per_node (comm/algorithms), and the [emulate] section's slow links between
// sites (comm/link_emulator.h). Sites are equal blocks of data-parallel coordinates
// (site = dp_rank / (dp / sites)), so the replicas split over "data centres" the way the planner
// assumes (plan/scale_out.h) and, with [diloco], whole islands sit in one site; every other
// coordinate (pp, cp, tp) of a replica stays with it.
#pragma once

#include <string>

#include "comm/device_mesh.h"
#include "train/run_config.h"

namespace trillion {

// For a job of world_size = pp*dp*cp*tp processes (validated by the mesh).
comm::MeshOptions mesh_options(const RunConfig& config, int world_size);

// "allreduce ring; emulated link between 2 sites: 5 ms one way, 10 Gb/s" (events.log).
std::string describe_mesh_options(const comm::MeshOptions& options);

}  // namespace trillion
