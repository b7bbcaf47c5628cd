// See hosts.h.
#include "comm/hosts.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "comm/communicator.h"
#include "comm/device_mesh.h"
#include "core/error.h"

namespace trillion::comm {

std::vector<HostfileEntry> read_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw Error(
        fmt::format("hostfile {}: cannot be read (one line per machine: 'host slots=K')", path));
  }
  static const std::regex kLine(R"(^\s*([A-Za-z0-9_.:-]+)(\s+slots\s*=\s*(\d+))?\s*$)");
  static const std::regex kSite(R"(site\s*=\s*(\d+))");
  std::vector<HostfileEntry> entries;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::string comment;
    if (const size_t hash = line.find('#'); hash != std::string::npos) {
      comment = line.substr(hash + 1);
      line.erase(hash);
    }
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::smatch m;
    if (!std::regex_match(line, m, kLine)) {
      throw Error(
          fmt::format("hostfile {} line {}: '{}' is not 'host [slots=K]'", path, number, line));
    }
    HostfileEntry e;
    e.host = m[1];
    e.slots = m[3].matched ? std::stoi(m[3]) : 1;
    if (e.slots < 1) {
      throw Error(
          fmt::format("hostfile {} line {}: slots={} must be at least 1", path, number, e.slots));
    }
    if (std::regex_search(comment, m, kSite)) e.site = std::stoi(m[1]);
    static const std::regex kAddress(R"(addr\s*=\s*([0-9A-Fa-f.:]+))");
    if (std::regex_search(comment, m, kAddress)) e.address = m[1];
    entries.push_back(e);
  }
  if (entries.empty()) throw Error(fmt::format("hostfile {}: names no host", path));
  return entries;
}

int JobHosts::sites() const {
  return static_cast<int>(std::set<int>(site_of_host.begin(), site_of_host.end()).size());
}

JobHosts job_hosts(const std::vector<std::string>& host_of_rank,
                   const std::vector<HostfileEntry>& entries) {
  JobHosts h;
  std::map<std::string, int> index;
  for (const std::string& name : host_of_rank) {
    auto [it, added] = index.emplace(name, static_cast<int>(h.names.size()));
    if (added) {
      h.names.push_back(name);
      int site = 0;
      for (const HostfileEntry& e : entries) {
        if (e.host == name) site = e.site;
      }
      h.site_of_host.push_back(site);
    }
    h.host_of_rank.push_back(it->second);
  }
  return h;
}

JobHosts map_ranks_by_slot(const std::vector<HostfileEntry>& entries, int world_size,
                           const std::string& path) {
  std::vector<std::string> names;
  for (const HostfileEntry& e : entries) {
    for (int s = 0; s < e.slots && static_cast<int>(names.size()) < world_size; ++s) {
      names.push_back(e.host);
    }
  }
  if (static_cast<int>(names.size()) < world_size) {
    throw Error(fmt::format("hostfile {} has {} slot(s) for {} process(es); add hosts or slots",
                            path, names.size(), world_size));
  }
  return job_hosts(names, entries);
}

JobHosts exchange_hosts(Communicator& comm) {
  // Hostnames of at most 255 bytes, packed 4 to an f64 (exact).
  constexpr int kMaxName = 256, kWords = kMaxName / 4;
  char name[kMaxName] = {};
  if (::gethostname(name, kMaxName - 1) != 0) name[0] = '?';
  const int n = comm.size();
  std::vector<double> mine(kWords), all(static_cast<size_t>(n) * kWords);
  for (int w = 0; w < kWords; ++w) {
    uint32_t word = 0;
    for (int i = 0; i < 4; ++i) {
      word |= uint32_t{static_cast<unsigned char>(name[4 * w + i])} << (8 * i);
    }
    mine[static_cast<size_t>(w)] = word;
  }
  comm.all_gather(Tensor(mine.data(), DType::f64, {kWords}),
                  Tensor(all.data(), DType::f64, {static_cast<int64_t>(n) * kWords}));
  std::vector<std::string> names;
  for (int r = 0; r < n; ++r) {
    std::string s;
    bool ended = false;
    for (int w = 0; w < kWords && !ended; ++w) {
      const auto word = static_cast<uint32_t>(all[static_cast<size_t>(r) * kWords + w]);
      for (int i = 0; i < 4 && !ended; ++i) {
        const char c = static_cast<char>((word >> (8 * i)) & 0xff);
        ended = c == 0;
        if (!ended) s += c;
      }
    }
    names.push_back(s);
  }
  std::vector<HostfileEntry> entries;
  if (const char* hostfile = std::getenv("TRILLION_HOSTFILE"); hostfile != nullptr && *hostfile) {
    try {
      entries = read_hostfile(hostfile);
    } catch (const Error&) {
      // Sites are a report's detail: a hostfile mpirun accepted but we cannot read leaves site 0.
    }
  }
  return job_hosts(names, entries);
}

const char* link_class_name(LinkClass c) {
  switch (c) {
    case LinkClass::inside_host:
      return "inside_host";
    case LinkClass::across_hosts:
      return "across_hosts";
    case LinkClass::across_sites:
      return "across_sites";
    case LinkClass::mixed:
      return "mixed";
  }
  return "?";
}

LinkClass group_link_class(const MeshLayout& layout, const JobHosts& hosts, MeshGroup g, int rank) {
  return link_class_of(hosts, layout.group_ranks(g, rank), rank);
}

LinkClass link_class_of(const JobHosts& hosts, const std::vector<int>& members, int rank) {
  const int host = hosts.host_of_rank[rank], site = hosts.site_of_rank(rank);
  bool same_host = false, other_host_same_site = false, other_site = false;
  for (int peer : members) {
    if (peer == rank) continue;
    if (hosts.host_of_rank[peer] == host) {
      same_host = true;
    } else if (hosts.site_of_rank(peer) == site) {
      other_host_same_site = true;
    } else {
      other_site = true;
    }
  }
  if (!other_host_same_site && !other_site) return LinkClass::inside_host;
  if (same_host) return LinkClass::mixed;
  if (other_site && !other_host_same_site) return LinkClass::across_sites;
  if (!other_site) return LinkClass::across_hosts;
  return LinkClass::mixed;
}

bool groups_cross_hosts(const MeshLayout& layout, const JobHosts& hosts, MeshGroup g) {
  for (int r = 0; r < layout.shape().world_size(); ++r) {
    for (int peer : layout.group_ranks(g, r)) {
      if (hosts.host_of_rank[peer] != hosts.host_of_rank[r]) return true;
    }
  }
  return false;
}

void check_tp_inside_hosts(const MeshLayout& layout, const JobHosts& hosts) {
  const int tp = layout.shape().tp;
  if (tp == 1) return;
  for (int r = 0; r < layout.shape().world_size(); r += tp) {
    const std::vector<int> members = layout.group_ranks(MeshGroup::tp, r);
    std::vector<int> where;
    std::string names;
    for (int m : members) {
      const int host = hosts.host_of_rank[m];
      if (std::find(where.begin(), where.end(), host) != where.end()) continue;
      where.push_back(host);
      names += (names.empty() ? "" : ", ") + hosts.names[host];
    }
    if (where.size() > 1) {
      throw Error(fmt::format(
          "parallel.tp = {}: the tensor-parallel group of ranks {}..{} spans hosts {}; tp "
          "exchanges activations in every layer and must stay inside one host: give every host "
          "a multiple of {} slots (hostfile 'slots=K'), or lower parallel.tp",
          tp, members.front(), members.back(), names, tp));
    }
  }
}

nlohmann::json link_bytes_json(const LinkBytes& b, const JobHosts& hosts) {
  nlohmann::json j = {{"hosts", hosts.hosts()}, {"sites", hosts.sites()}};
  for (int c = 0; c < kLinkClasses; ++c) {
    j[link_class_name(static_cast<LinkClass>(c))] = b.sent[c];
  }
  return j;
}

}  // namespace trillion::comm
