// DeviceMesh: the rank grid of a run and one communicator per parallel group, passed explicitly
// (no globals, no singleton). Dimensions, slowest to fastest varying: pp (pipeline), dp (data),
// cp (context), tp (tensor) — tp fastest so a tensor-parallel group is adjacent ranks, which
// launchers place on one machine, where bandwidth is highest. Expert parallelism (ep) is carved
// out of the dp x cp plane: experts are sharded over ep ranks of that plane, and each expert
// shard is replicated over the remaining dp*cp/ep ranks (the expert-data group, "edp").
//
//   rank = ((pp_i * dp + dp_i) * cp + cp_i) * tp + tp_i
//
// Worked example, 16 ranks, pp=2 dp=2 cp=2 tp=2, ep=2 (Megatron's RankGenerator docstring has the
// same kind of table):
//
//   rank  pp dp cp tp      group (members)
//    0    0  0  0  0       tp : {0,1} {2,3} {4,5} {6,7} {8,9} {10,11} {12,13} {14,15}
//    1    0  0  0  1       cp : {0,2} {1,3} {4,6} {5,7} {8,10} {9,11} {12,14} {13,15}
//    2    0  0  1  0       dp : {0,4} {1,5} {2,6} {3,7} {8,12} {9,13} {10,14} {11,15}
//    3    0  0  1  1       dp_cp (gradient reduction when cp > 1):
//    4    0  1  0  0            {0,2,4,6} {1,3,5,7} {8,10,12,14} {9,11,13,15}
//    5    0  1  0  1       pp : {0,8} {1,9} ... {7,15}
//    6    0  1  1  0       ep : position e = dp_i*cp + cp_i in the dp x cp plane, groups of ep
//    7    0  1  1  1            consecutive e: {0,2} {4,6} {1,3} {5,7} {8,10} {12,14} ...
//    8    1  0  0  0       edp: same e mod ep: {0,4} {2,6} {1,5} {3,7} {8,12} ...
//   ...                    (rank 8..15 repeat 0..7 with pp=1)
//
// With experts_over_tp (MoE layers whose tp ranks act as extra expert ranks) the ep group takes
// the tp ranks in too: in the example, ep = {0,1,2,3} {4,5,6,7} {8,9,10,11} {12,13,14,15}, and
// edp (same experts) is unchanged.
//
// Validation (validate_mesh) runs before anything is allocated and names the value and the fix:
// world size must equal pp*dp*cp*tp, tp must divide the query and key/value heads, pp <= layers,
// dp the global micro-batch, cp the sequence length, ep the dp*cp plane and the experts.
//
// MeshOptions choose how the groups communicate, without the code that uses them knowing: the
// all-reduce algorithm (comm/algorithms: the MPI library's, an explicit ring, or hierarchical
// over nodes of ranks_per_node consecutive world ranks) and, for tests and benchmarks, emulated
// slow links between `sites` (equal blocks of consecutive world ranks, or any assignment of ranks
// to sites: the trainer makes sites blocks of dp coordinates) (comm/link_emulator.h).
// Every group is wrapped the same way: split -> LinkEmulator -> AlgorithmCommunicator.
//
// Hosts (comm/hosts.h): the mesh exchanges hostnames over a private communicator, so it knows the
// host of every world rank; sites come from the hostfile named by TRILLION_HOSTFILE (trillion
// launch --hostfile sets it). A tp group across hosts is refused. Hierarchical all-reduce uses
// the real host boundary unless parallel.ranks_per_node emulates nodes inside one host. The
// groups' sent bytes are summed per link class (link_bytes).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/algorithms/algorithm_communicator.h"
#include "comm/communicator.h"
#include "comm/hosts.h"
#include "comm/link_emulator.h"

namespace trillion::comm {

struct MeshShape {
  int pp = 1, dp = 1, cp = 1, tp = 1;
  int ep = 1;  // expert parallel degree, within dp x cp
  // MoE with parallel.expert_tp = 1 under tp: the ep group also spans the tp ranks (tp * ep
  // members, ordered ep-major: member (e % ep) * tp + tp_i), each holding whole experts.
  bool experts_over_tp = false;
  int world_size() const { return pp * dp * cp * tp; }
};

struct MeshCoord {
  int pp = 0, dp = 0, cp = 0, tp = 0;
  bool operator==(const MeshCoord&) const = default;
};

// What the degrees must divide. Zero means "not constrained" (e.g. a dense model has no experts).
struct MeshLimits {
  int64_t n_heads = 0, n_kv_heads = 0, n_layers = 0;
  int64_t micro_batch = 0;  // sequences per micro-batch across all dp ranks
  int64_t seq_len = 0;
  int64_t n_experts = 0;
};

struct MeshOptions {
  AllReduceAlgorithm all_reduce = AllReduceAlgorithm::mpi;
  int ranks_per_node = 0;  // consecutive world ranks per node; 0: one node holds every rank
  int sites = 1;           // emulated sites; 1: no emulation
  LinkModel between_sites;
  // The site of each world rank; empty: `sites` equal blocks of consecutive world ranks.
  std::vector<int> site_of_rank;
};

// Throws Error naming the offending degree and what to change.
void validate_mesh(const MeshShape& shape, int world_size, const MeshLimits& limits);

enum class MeshGroup : uint8_t { tp, cp, dp, pp, dp_cp, ep, edp };
inline constexpr int kMeshGroups = 7;
std::string group_name(MeshGroup g);

// Rank <-> coordinate arithmetic and group membership; no communication.
class MeshLayout {
 public:
  explicit MeshLayout(const MeshShape& shape);
  const MeshShape& shape() const { return shape_; }
  int rank_of(const MeshCoord& c) const;
  MeshCoord coord_of(int rank) const;
  // The ranks of `rank`'s group of kind g, in group order (position i = group rank i).
  std::vector<int> group_ranks(MeshGroup g, int rank) const;

 private:
  MeshShape shape_;
};

class DeviceMesh {
 public:
  // Collective over `world`: validates the shape against world.size() and splits one
  // communicator per group. `world` must outlive the mesh.
  DeviceMesh(Communicator& world, const MeshShape& shape, const MeshLimits& limits = {},
             const MeshOptions& options = {});
  const MeshLayout& layout() const { return layout_; }
  const MeshShape& shape() const { return layout_.shape(); }
  const MeshCoord& coord() const { return coord_; }
  Communicator& world() { return world_; }
  Communicator& group(MeshGroup g) { return *groups_[static_cast<int>(g)]; }
  // A group beyond the mesh's own (e.g. DiLoCo's islands), split from the world by (color, key)
  // and wrapped as the mesh's groups are: same algorithm, same emulated wires. Collective over
  // the world.
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name);
  // Where world rank `rank` runs under `options` (node and emulated site).
  static int node_of(const MeshOptions& options, int world_size, int rank);
  static int site_of(const MeshOptions& options, int world_size, int rank);
  // Counters of every group plus the world communicator, summed.
  CommCounters total_counters() const;
  // Where every world rank runs (the same on every rank).
  const JobHosts& hosts() const { return hosts_; }
  // The bytes this rank's groups (and the world) sent, per link class.
  LinkBytes link_bytes() const;
  // link_bytes summed over every rank: collective over the world (on a private communicator, so
  // no group's counters change).
  LinkBytes link_bytes_total();

 private:
  std::unique_ptr<Communicator> wrap(std::unique_ptr<Communicator> group) const;
  void discover_hosts();

  Communicator& world_;
  MeshLayout layout_;
  MeshOptions options_;
  std::shared_ptr<LinkEmulator::Links> links_;  // one set of wires for every group
  MeshCoord coord_;
  std::vector<std::unique_ptr<Communicator>> groups_;
  std::unique_ptr<Communicator> private_;  // the host exchange and link_bytes_total
  JobHosts hosts_;
  std::vector<LinkClass> group_class_;  // per group kind, this rank's group
  LinkClass world_class_ = LinkClass::inside_host;
};

}  // namespace trillion::comm
