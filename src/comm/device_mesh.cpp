// See device_mesh.h. Groups are made with Communicator::split: the color identifies the group (the
// coordinates that stay fixed within it) and the key orders its members.
#include "comm/device_mesh.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace trillion::comm {

namespace {

void require_divides(int64_t degree, int64_t value, const char* degree_key, const char* what) {
  if (value > 0 && value % degree != 0) {
    throw Error(fmt::format("{} = {} does not divide {} = {}; choose a {} that divides {}",
                            degree_key, degree, what, value, degree_key, value));
  }
}

}  // namespace

void validate_mesh(const MeshShape& s, int world_size, const MeshLimits& limits) {
  const std::pair<const char*, int> degrees[] = {{"parallel.pp", s.pp},
                                                 {"parallel.dp", s.dp},
                                                 {"parallel.cp", s.cp},
                                                 {"parallel.tp", s.tp},
                                                 {"parallel.ep", s.ep}};
  for (const auto& [key, value] : degrees) {
    if (value < 1) throw Error(fmt::format("{} = {} must be at least 1", key, value));
  }
  if (s.world_size() != world_size) {
    throw Error(fmt::format(
        "the job has {} process(es) but pp*dp*cp*tp = {}*{}*{}*{} = {}; launch {} process(es) "
        "(trillion launch -n {}) or change the parallel degrees",
        world_size, s.pp, s.dp, s.cp, s.tp, s.world_size(), s.world_size(), s.world_size()));
  }
  require_divides(s.tp, limits.n_heads, "parallel.tp", "model.n_heads");
  require_divides(s.tp, limits.n_kv_heads, "parallel.tp", "model.n_kv_heads");
  // Stages hold whole layers, as evenly as they split (plan/stage_partition.h): pp <= layers.
  if (limits.n_layers > 0 && s.pp > limits.n_layers) {
    throw Error(
        fmt::format("parallel.pp = {} exceeds model.n_layers = {}: every pipeline stage "
                    "needs at least one whole layer",
                    s.pp, limits.n_layers));
  }
  require_divides(s.dp, limits.micro_batch, "parallel.dp", "train.micro_batch");
  require_divides(s.cp, limits.seq_len, "parallel.cp", "model.seq_len");
  if ((s.dp * s.cp) % s.ep != 0) {
    throw Error(
        fmt::format("parallel.ep = {} must divide dp*cp = {} (experts are sharded within "
                    "the data x context plane)",
                    s.ep, s.dp * s.cp));
  }
  require_divides(s.ep, limits.n_experts, "parallel.ep", "model.n_routed_experts");
  if (s.experts_over_tp) {
    require_divides(s.ep * s.tp, limits.n_experts, "parallel.ep x parallel.tp",
                    "model.n_routed_experts");
  }
}

std::string group_name(MeshGroup g) {
  switch (g) {
    case MeshGroup::tp:
      return "tp";
    case MeshGroup::cp:
      return "cp";
    case MeshGroup::dp:
      return "dp";
    case MeshGroup::pp:
      return "pp";
    case MeshGroup::dp_cp:
      return "dp_cp";
    case MeshGroup::ep:
      return "ep";
    case MeshGroup::edp:
      return "edp";
  }
  return "?";
}

MeshLayout::MeshLayout(const MeshShape& shape) : shape_(shape) {}

int MeshLayout::rank_of(const MeshCoord& c) const {
  return ((c.pp * shape_.dp + c.dp) * shape_.cp + c.cp) * shape_.tp + c.tp;
}

MeshCoord MeshLayout::coord_of(int rank) const {
  MeshCoord c;
  c.tp = rank % shape_.tp;
  rank /= shape_.tp;
  c.cp = rank % shape_.cp;
  rank /= shape_.cp;
  c.dp = rank % shape_.dp;
  c.pp = rank / shape_.dp;
  return c;
}

namespace {

// (color, key) of `c` for group kind g: color is the same for exactly the members of one group,
// key is the member's position in it.
std::pair<int, int> color_key(const MeshShape& s, MeshGroup g, const MeshCoord& c) {
  const int e = c.dp * s.cp + c.cp;  // position in the dp x cp plane
  switch (g) {
    case MeshGroup::tp:
      return {(c.pp * s.dp + c.dp) * s.cp + c.cp, c.tp};
    case MeshGroup::cp:
      return {(c.pp * s.dp + c.dp) * s.tp + c.tp, c.cp};
    case MeshGroup::dp:
      return {(c.pp * s.cp + c.cp) * s.tp + c.tp, c.dp};
    case MeshGroup::pp:
      return {(c.dp * s.cp + c.cp) * s.tp + c.tp, c.pp};
    case MeshGroup::dp_cp:
      return {c.pp * s.tp + c.tp, e};
    case MeshGroup::ep:
      if (s.experts_over_tp)
        return {c.pp * (s.dp * s.cp / s.ep) + e / s.ep, e % s.ep * s.tp + c.tp};
      return {(c.pp * s.tp + c.tp) * (s.dp * s.cp / s.ep) + e / s.ep, e % s.ep};
    case MeshGroup::edp:
      return {(c.pp * s.tp + c.tp) * s.ep + e % s.ep, e / s.ep};
  }
  return {0, 0};
}

}  // namespace

std::vector<int> MeshLayout::group_ranks(MeshGroup g, int rank) const {
  const int color = color_key(shape_, g, coord_of(rank)).first;
  std::vector<std::pair<int, int>> members;  // (key, rank)
  for (int r = 0; r < shape_.world_size(); ++r) {
    const auto [c, k] = color_key(shape_, g, coord_of(r));
    if (c == color) members.emplace_back(k, r);
  }
  std::sort(members.begin(), members.end());
  std::vector<int> ranks;
  for (const auto& m : members) ranks.push_back(m.second);
  return ranks;
}

namespace {

void validate_options(const MeshOptions& o, int world_size) {
  if (o.ranks_per_node < 0 || (o.ranks_per_node > 0 && world_size % o.ranks_per_node != 0)) {
    throw Error(fmt::format(
        "parallel.ranks_per_node = {} must divide the job's {} process(es) (or be 0: one node)",
        o.ranks_per_node, world_size));
  }
  if (o.sites < 1 || world_size % o.sites != 0) {
    throw Error(
        fmt::format("{} emulated sites must divide the job's {} process(es)", o.sites, world_size));
  }
  TRILLION_CHECK(o.site_of_rank.empty() || static_cast<int>(o.site_of_rank.size()) == world_size,
                 "one site per world rank");
}

}  // namespace

int DeviceMesh::node_of(const MeshOptions& options, int, int rank) {
  return options.ranks_per_node > 0 ? rank / options.ranks_per_node : 0;
}

namespace {

// parallel.ranks_per_node emulates nodes inside one host; otherwise a node is a real host.
int algorithm_node(const MeshOptions& options, const JobHosts& hosts, int world_size, int rank) {
  if (options.ranks_per_node > 0 || hosts.host_of_rank.empty()) {
    return DeviceMesh::node_of(options, world_size, rank);
  }
  return hosts.host_of_rank[static_cast<size_t>(rank)];
}

}  // namespace

int DeviceMesh::site_of(const MeshOptions& options, int world_size, int rank) {
  if (!options.site_of_rank.empty()) return options.site_of_rank[static_cast<size_t>(rank)];
  return rank / (world_size / options.sites);
}

DeviceMesh::DeviceMesh(Communicator& world, const MeshShape& shape, const MeshLimits& limits,
                       const MeshOptions& options)
    : world_(world),
      layout_(shape),
      options_(options),
      links_(std::make_shared<LinkEmulator::Links>()) {
  validate_mesh(shape, world.size(), limits);
  validate_options(options, world.size());
  coord_ = layout_.coord_of(world.rank());
  discover_hosts();
  check_tp_inside_hosts(layout_, hosts_);
  std::vector<int> everyone(static_cast<size_t>(world.size()));
  for (int r = 0; r < world.size(); ++r) everyone[static_cast<size_t>(r)] = r;
  world_class_ = link_class_of(hosts_, everyone, world.rank());
  for (int g = 0; g < kMeshGroups; ++g) {
    const auto kind = static_cast<MeshGroup>(g);
    const auto [color, key] = color_key(shape, kind, coord_);
    groups_.push_back(wrap(world.split(color, key, group_name(kind))));
    group_class_.push_back(group_link_class(layout_, hosts_, kind, world.rank()));
  }
}

// Every rank's host, gathered over a private copy of the world so that no counted communicator
// sees it; sites from the hostfile named by TRILLION_HOSTFILE.
void DeviceMesh::discover_hosts() {
  private_ = world_.split(0, world_.rank(), "hosts");
  hosts_ = exchange_hosts(*private_);
}

LinkBytes DeviceMesh::link_bytes() const {
  LinkBytes b;
  b.sent[static_cast<int>(world_class_)] += world_.counters().total_sent();
  for (size_t g = 0; g < groups_.size(); ++g) {
    uint64_t sent = groups_[g]->counters().total_sent();
    // A group with members on this host and on others: an explicit algorithm over real hosts
    // knows which of its messages crossed (comm/algorithms); the library's own does not say.
    const auto* algorithm = dynamic_cast<const AlgorithmCommunicator*>(groups_[g].get());
    if (group_class_[g] == LinkClass::mixed && algorithm != nullptr &&
        options_.ranks_per_node == 0) {
      const LinkTraffic& t = algorithm->link_traffic();
      b.sent[static_cast<int>(LinkClass::inside_host)] += t.intra_node_sent;
      b.sent[static_cast<int>(LinkClass::across_hosts)] += t.inter_node_sent;
      sent -= std::min(sent, t.intra_node_sent + t.inter_node_sent);
    }
    b.sent[static_cast<int>(group_class_[g])] += sent;
  }
  return b;
}

LinkBytes DeviceMesh::link_bytes_total() {
  const LinkBytes mine = link_bytes();
  std::vector<double> v(kLinkClasses);
  for (int c = 0; c < kLinkClasses; ++c) v[c] = static_cast<double>(mine.sent[c]);
  private_->all_reduce(Tensor(v.data(), DType::f64, {kLinkClasses}));
  LinkBytes total;
  for (int c = 0; c < kLinkClasses; ++c) total.sent[c] = static_cast<uint64_t>(v[c]);
  return total;
}

std::unique_ptr<Communicator> DeviceMesh::split(int color, int key, const std::string& name) {
  return wrap(world_.split(color, key, name));
}

// split -> LinkEmulator -> AlgorithmCommunicator, so the algorithm's messages are the delayed ones.
std::unique_ptr<Communicator> DeviceMesh::wrap(std::unique_ptr<Communicator> group) const {
  const int n = world_.size(), r = world_.rank();
  if (options_.sites > 1) {
    group = std::make_unique<LinkEmulator>(std::move(group), site_of(options_, n, r),
                                           options_.between_sites, LinkModel{}, r, links_);
  }
  if (options_.all_reduce != AllReduceAlgorithm::mpi) {
    group = std::make_unique<AlgorithmCommunicator>(std::move(group), options_.all_reduce,
                                                    algorithm_node(options_, hosts_, n, r));
  }
  return group;
}

CommCounters DeviceMesh::total_counters() const {
  CommCounters total = world_.counters();
  for (const auto& g : groups_) total += g->counters();
  return total;
}

}  // namespace trillion::comm
