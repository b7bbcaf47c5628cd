// See mesh_options.h.
#include "train/mesh_options.h"

#include <fmt/format.h>

#include <cmath>

namespace trillion {

comm::MeshOptions mesh_options(const RunConfig& c, int world_size) {
  const ParallelConfig& p = c.parallel;
  comm::MeshOptions o;
  o.all_reduce = comm::parse_algorithm(p.allreduce, "parallel.allreduce");
  o.ranks_per_node = static_cast<int>(p.ranks_per_node);
  const int sites = static_cast<int>(c.emulate.sites);
  if (sites <= 1) return o;
  o.sites = sites;
  o.between_sites = {c.emulate.latency_ms * 1e-3,
                     c.emulate.gbps > 0 ? c.emulate.gbps * 1e9 / 8 : INFINITY};
  const comm::MeshLayout layout({.pp = static_cast<int>(p.pp),
                                 .dp = static_cast<int>(p.dp),
                                 .cp = static_cast<int>(p.cp),
                                 .tp = static_cast<int>(p.tp)});
  const int replicas_per_site = static_cast<int>(p.dp) / sites;
  for (int r = 0; r < world_size; ++r) {
    // A world size that is not the layout's is reported by the mesh; site 0 until then.
    const int dp_rank = world_size == layout.shape().world_size() ? layout.coord_of(r).dp : 0;
    o.site_of_rank.push_back(dp_rank / replicas_per_site);
  }
  return o;
}

std::string describe_mesh_options(const comm::MeshOptions& o) {
  std::string text = fmt::format("allreduce {}", comm::algorithm_name(o.all_reduce));
  if (o.ranks_per_node > 0) text += fmt::format(" ({} ranks per node)", o.ranks_per_node);
  if (o.sites > 1) {
    text += fmt::format("; emulated links between {} sites: {:g} ms one way, ", o.sites,
                        o.between_sites.latency_s * 1e3);
    text += std::isfinite(o.between_sites.bytes_per_second)
                ? fmt::format("{:g} Gb/s", o.between_sites.bytes_per_second * 8 / 1e9)
                : std::string("no bandwidth limit");
  }
  return text;
}

}  // namespace trillion
