// Hosts of a job: which machine each world rank runs on, which site (data centre) each machine is
// in, and what that means for the mesh's groups. The engine learns hosts in two ways, and both
// give the same answer for a job mpirun started from a hostfile:
//   - a running job exchanges hostnames (DeviceMesh does, over a private communicator);
//   - `trillion inspect --hostfile F` maps ranks to the hostfile's slots the way Open MPI does by
//     default (by slot: host 1's slots first, then host 2's, ...).
// Sites come only from the hostfile: a host line may end in "# site=S" (scripts/hosts.sh writes
// it); Open MPI reads the "#" as a comment. A host with no site is in site 0. "# addr=A" gives
// the address the launcher probes when a job hangs (cli/supervisor.cpp).
//
// Placement rule (DESIGN.md, "Hosts are part of the mesh"): tensor parallelism exchanges
// activations several times per layer, so a tp group must sit inside one host; a layout that puts
// one across hosts is refused (check_tp_inside_hosts) with the fix. cp, dp, pp, ep may cross
// hosts; cp across hosts is allowed (its ring overlaps compute) and shown by inspect.
//
// Link classes: a group's bytes are "inside_host" when all its members share this rank's host,
// "across_hosts" when every other member is on another host of the same site, "across_sites"
// when every other member is in another site, and "mixed" otherwise (then which bytes took which
// link depends on the collective's algorithm, not on the group: under parallel.allreduce = ring
// or hierarchical the mesh counts each message of the explicit algorithm by its peer's host, and
// only the library's own collectives stay "mixed").
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace trillion::comm {

class MeshLayout;
class Communicator;
enum class MeshGroup : uint8_t;

struct HostfileEntry {
  std::string host;
  int slots = 1;
  int site = 0;
  std::string address;  // "# addr=A" (scripts/hosts.sh writes it); empty: resolve the name
};

// Reads an Open MPI hostfile ("host [slots=K] [# site=S]", "#" comments, blank lines). Throws
// Error naming the file and line for anything else.
std::vector<HostfileEntry> read_hostfile(const std::string& path);

struct JobHosts {
  std::vector<std::string> names;  // distinct hosts, in order of their first rank
  std::vector<int> host_of_rank;   // index into names, per world rank
  std::vector<int> site_of_host;   // per host (all 0 without sites)

  int hosts() const { return static_cast<int>(names.size()); }
  int sites() const;
  int site_of_rank(int rank) const { return site_of_host[host_of_rank[rank]]; }
};

// One host per distinct name, in order of first appearance; sites looked up by name in
// `entries` (0 when absent).
JobHosts job_hosts(const std::vector<std::string>& host_of_rank,
                   const std::vector<HostfileEntry>& entries = {});
// Open MPI's default by-slot mapping of `world_size` ranks onto the hostfile; Error when the
// slots are too few.
JobHosts map_ranks_by_slot(const std::vector<HostfileEntry>& entries, int world_size,
                           const std::string& path);

// Every member's hostname, gathered over `comm` (collective), with sites from the hostfile that
// TRILLION_HOSTFILE names (trillion launch --hostfile sets it).
JobHosts exchange_hosts(Communicator& comm);

enum class LinkClass : uint8_t { inside_host, across_hosts, across_sites, mixed };
inline constexpr int kLinkClasses = 4;
const char* link_class_name(LinkClass c);

// The class of `rank`'s group of kind g (see the header comment).
LinkClass group_link_class(const MeshLayout& layout, const JobHosts& hosts, MeshGroup g, int rank);
// The same for any group, given its members' world ranks.
LinkClass link_class_of(const JobHosts& hosts, const std::vector<int>& members, int rank);
// Whether any group of kind g has members on more than one host.
bool groups_cross_hosts(const MeshLayout& layout, const JobHosts& hosts, MeshGroup g);

// Throws Error when a tp group spans hosts, naming the group, its hosts and the fix.
void check_tp_inside_hosts(const MeshLayout& layout, const JobHosts& hosts);

// Bytes sent per link class (by one rank, or summed over ranks).
struct LinkBytes {
  uint64_t sent[kLinkClasses] = {};
};
nlohmann::json link_bytes_json(const LinkBytes& b, const JobHosts& hosts);

}  // namespace trillion::comm
