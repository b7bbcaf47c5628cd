// See stage_partition.h.
#include "plan/stage_partition.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace trillion::plan {

namespace {

void check(int64_t n_layers, int n_stages, int64_t most) {
  if (n_stages < 1 || n_stages > most) {
    throw Error(fmt::format(
        "{} pipeline stage(s) for {} layer(s): need 1 <= stages <= {} (every stage holds at "
        "least one whole layer{})",
        n_stages, n_layers, most,
        most > n_layers ? "; a weighed embedding or head may fill a stage alone" : ""));
  }
}

std::vector<StageUnits> from_counts(const std::vector<int64_t>& counts) {
  std::vector<StageUnits> out;
  int64_t next_layer = 0;
  const int n = static_cast<int>(counts.size());
  for (int s = 0; s < n; ++s) {
    StageUnits u;
    u.first_unit = s == 0 ? 0 : static_cast<int>(1 + next_layer);
    next_layer += counts[s];
    u.last_unit = static_cast<int>(next_layer);  // unit of the stage's last layer
    if (s == n - 1) u.last_unit += 1;            // + the head
    out.push_back(u);
  }
  return out;
}

}  // namespace

std::vector<StageUnits> partition_stages(int64_t n_layers, int n_stages) {
  check(n_layers, n_stages, n_layers);
  std::vector<int64_t> counts;
  const int64_t base = n_layers / n_stages, extra = n_layers % n_stages;
  for (int s = 0; s < n_stages; ++s) counts.push_back(base + (s < extra ? 1 : 0));
  return from_counts(counts);
}

int64_t max_stages(int64_t n_layers, const StageWeights& w) {
  return n_layers + (w.embedding > 0 ? 1 : 0) + (w.head > 0 ? 1 : 0);
}

std::vector<StageUnits> partition_stages(int64_t n_layers, int n_stages, const StageWeights& w) {
  if (w.embedding < 0 || w.head < 0) throw Error("stage weights must be >= 0");
  check(n_layers, n_stages, max_stages(n_layers, w));
  const int S = n_stages;
  auto weight = [&](int s) { return (s == 0 ? w.embedding : 0.0) + (s == S - 1 ? w.head : 0.0); };
  // A stage's fewest layers: 1, or 0 for an end stage whose embedding or head has weight (with
  // more than one stage), which then runs that unit alone (Llama 3 2407.21783 §3.3.2).
  auto min_layers = [&](int s) -> int64_t {
    if (S == 1) return 1;
    if (s == 0 && w.embedding > 0) return 0;
    if (s == S - 1 && w.head > 0) return 0;
    return 1;
  };
  // Capacity of stage s under a bound B: the whole layers that keep its cost <= B (at least its
  // fewest).
  auto capacities = [&](double bound) {
    std::vector<int64_t> cap(S);
    for (int s = 0; s < S; ++s)
      cap[s] = std::max<int64_t>(min_layers(s),
                                 static_cast<int64_t>(std::floor(bound - weight(s) + 1e-9)));
    return cap;
  };
  auto total = [](const std::vector<int64_t>& c) {
    int64_t t = 0;
    for (int64_t x : c) t += x;
    return t;
  };
  // The optimal bound is some k + extra, k in 1..L, extra one of four sums of the weights, and
  // feasibility grows with the bound: binary search each extra's k, keep the smallest bound
  // (O(S log L) per split, not a sort of 4L bounds: the search splits a 2^14-layer model often).
  auto feasible = [&](double bound) { return total(capacities(bound)) >= n_layers; };
  double best = INFINITY;
  for (double extra : {0.0, w.embedding, w.head, w.embedding + w.head}) {
    int64_t lo = 1, hi = n_layers + 1;  // hi = n_layers + 1: no k fits
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (feasible(static_cast<double>(mid) + extra))
        hi = mid;
      else
        lo = mid + 1;
    }
    if (lo <= n_layers) best = std::min(best, static_cast<double>(lo) + extra);
  }
  TRILLION_CHECK(best < INFINITY, "stage partition: no bound fits the layers");
  std::vector<int64_t> counts = capacities(best);
  // Remove the surplus one layer at a time from the costliest stage, the latest among equals,
  // so that zero weights give the even split (extra layers on the first stages).
  for (int64_t surplus = total(counts) - n_layers; surplus > 0; --surplus) {
    int pick = -1;
    for (int s = S - 1; s >= 0; --s) {
      if (counts[s] <= min_layers(s)) continue;
      if (pick < 0 || counts[s] + weight(s) > counts[pick] + weight(pick) + 1e-9) pick = s;
    }
    TRILLION_CHECK(pick >= 0, "stage partition: no stage can give up a layer");
    --counts[pick];
  }
  return from_counts(counts);
}

std::vector<StageUnits> partition_from_counts(int64_t n_layers, const std::vector<int>& counts) {
  const int S = static_cast<int>(counts.size());
  int64_t sum = 0;
  for (int s = 0; s < S; ++s) {
    const bool end = S > 1 && (s == 0 || s == S - 1);
    if (counts[s] < (end ? 0 : 1))
      throw Error(fmt::format(
          "stage {} of {} holds {} layers: every stage needs a layer (only the first and the "
          "last may hold the embedding or the head alone)",
          s, S, counts[s]));
    sum += counts[s];
  }
  if (S < 1 || sum != n_layers)
    throw Error(fmt::format("{} stages hold {} layers in all; the model has {}", S, sum, n_layers));
  return from_counts(std::vector<int64_t>(counts.begin(), counts.end()));
}

bool parse_stage_layer_counts(const std::string& text, std::vector<int>* out) {
  std::vector<int> counts;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t slash = std::min(text.find('/', start), text.size());
    const std::string item = text.substr(start, slash - start);
    char* end = nullptr;
    const long n = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || end != item.c_str() + item.size() || n < 0 || n > 1000000) return false;
    counts.push_back(static_cast<int>(n));
    start = slash + 1;
  }
  *out = std::move(counts);
  return true;
}

std::vector<StageUnits> engine_partition(int64_t n_layers, int n_stages,
                                         const std::vector<int>& counts) {
  if (counts.empty()) return partition_stages(n_layers, n_stages);
  if (static_cast<int>(counts.size()) != n_stages)
    throw Error(
        fmt::format("parallel.partition gives {} stages; this pipeline has {} (pp x "
                    "chunks{}): give one layer count per stage",
                    counts.size(), n_stages, n_stages > 1 ? ", in stage order" : ""));
  for (size_t s = 0; s < counts.size(); ++s)
    if (counts[s] < 1)
      throw Error(
          fmt::format("parallel.partition: stage {} holds no layer; every stage of the "
                      "engine needs one (the embedding and head ride on the end stages)",
                      s));
  return partition_from_counts(n_layers, counts);
}

std::vector<int> stage_layer_counts(const std::vector<StageUnits>& stages) {
  std::vector<int> out;
  const int n = static_cast<int>(stages.size());
  for (int s = 0; s < n; ++s) {
    int layers = stages[s].last_unit - stages[s].first_unit + 1;
    if (s == 0) --layers;      // the embedding unit
    if (s == n - 1) --layers;  // the head unit
    out.push_back(layers);
  }
  return out;
}

}  // namespace trillion::plan
