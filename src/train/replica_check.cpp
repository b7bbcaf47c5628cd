// See replica_check.h.
#include "train/replica_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace trillion {

namespace {

// One group's comparison: per-tensor hashes of the tensors `mine` selects, exchanged as exact
// 32-bit halves in f64 (what every Communicator reduces and gathers).
std::string compare_in(const ParameterSet& params, comm::Communicator& group, bool experts,
                       const char* group_name) {
  const TensorTable& table = params.table();
  std::vector<int> specs;
  for (int i = 0; i < static_cast<int>(table.specs().size()); ++i) {
    if ((table.spec(i).shard.group == ShardGroup::ep) == experts) specs.push_back(i);
  }
  if (group.size() == 1 || specs.empty()) return "";
  std::vector<double> mine(2 * specs.size());
  for (size_t k = 0; k < specs.size(); ++k) {
    const Tensor t = params.param(specs[k]);
    const uint64_t h = XXH64(t.raw(), t.bytes(), 0);
    mine[2 * k] = static_cast<double>(h >> 32);
    mine[2 * k + 1] = static_cast<double>(h & 0xffffffffu);
  }
  const int64_t n = static_cast<int64_t>(mine.size());
  std::vector<double> all(n * group.size());
  group.all_gather(Tensor(mine.data(), DType::f64, {n}),
                   Tensor(all.data(), DType::f64, {n * group.size()}));
  auto row = [&](int r) {
    return std::vector<double>(all.begin() + r * n, all.begin() + (r + 1) * n);
  };
  // Replicas by their hashes; the largest class is taken as the healthy one.
  std::map<std::vector<double>, std::vector<int>> classes;
  for (int r = 0; r < group.size(); ++r) classes[row(r)].push_back(r);
  if (classes.size() == 1) return "";
  const auto healthy = std::max_element(classes.begin(), classes.end(), [](auto& a, auto& b) {
    return a.second.size() < b.second.size();
  });
  const bool tie = std::count_if(classes.begin(), classes.end(), [&](auto& c) {
                     return c.second.size() == healthy->second.size();
                   }) > 1;
  // The first tensor that differs between the healthy class and another.
  std::string tensor;
  for (const auto& [hashes, ranks] : classes) {
    if (&hashes == &healthy->first) continue;
    for (size_t k = 0; k < specs.size() && tensor.empty(); ++k) {
      if (hashes[2 * k] != healthy->first[2 * k] ||
          hashes[2 * k + 1] != healthy->first[2 * k + 1]) {
        tensor = table.spec(specs[k]).name;
      }
    }
  }
  // The ranks named, in rank order (the classes are in the order of their hashes).
  std::vector<int> named;
  for (const auto& [hashes, ranks] : classes) {
    if (!tie && &hashes == &healthy->first) continue;
    named.insert(named.end(), ranks.begin(), ranks.end());
  }
  std::sort(named.begin(), named.end());
  std::string odd;
  for (int r : named) odd += fmt::format("{}{}", odd.empty() ? "" : ", ", r);
  return tie ? fmt::format(
                   "{} ranks {} hold different parameters (first: '{}'); with as many "
                   "replicas on each side the faulty one cannot be told apart",
                   group_name, odd, tensor)
             : fmt::format(
                   "{} rank(s) {} hold parameters that differ from the other {} "
                   "replica(s) (first: '{}')",
                   group_name, odd, healthy->second.size(), tensor);
}

}  // namespace

std::string compare_replicas(const ParameterSet& params, comm::Communicator& dense_group,
                             comm::Communicator& expert_group) {
  std::string dense = compare_in(params, dense_group, false, "dp");
  std::string experts = compare_in(params, expert_group, true, "expert-dp");
  if (!dense.empty() && !experts.empty()) return dense + "; " + experts;
  return dense.empty() ? experts : dense;
}

bool flip_requested(int world_rank, int64_t step) {
  static bool flipped = false;  // once per process: a rolled-back run replays the step clean
  if (flipped) return false;
  const char* spec = std::getenv("TRILLION_FLIP_PARAMETER_BIT");
  int r = -1;
  long long s = 0;
  if (spec == nullptr || std::sscanf(spec, "%d:%lld", &r, &s) != 2) return false;
  flipped = r == world_rank && s == step;
  return flipped;
}

void flip_one_bit(const ParameterSet& params) {
  const Tensor t = params.param(0);
  unsigned char byte;
  std::memcpy(&byte, t.raw(), 1);
  byte ^= 0x01;  // the lowest mantissa bit of the first element: a change no loss would show
  std::memcpy(t.raw(), &byte, 1);
}

}  // namespace trillion
