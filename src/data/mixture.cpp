// See mixture.h. Smooth weighted round-robin (nginx's): every position adds each source's quota
// to its credit, the source with the most credit (lowest index on ties) takes the position and
// pays the block size; credits stay within a bounded band, so every prefix of a block holds each
// source's share to within the number of sources.
#include "data/mixture.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/philox.h"

namespace trillion::data {

namespace {
// Largest-remainder rounding of the weights to quotas summing to kMixtureBlock.
std::vector<int64_t> quotas(const std::vector<double>& weights) {
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<int64_t> q(weights.size());
  std::vector<std::pair<double, size_t>> remainders;
  int64_t given = 0;
  for (size_t s = 0; s < weights.size(); ++s) {
    const double exact = weights[s] / total * static_cast<double>(kMixtureBlock);
    q[s] = static_cast<int64_t>(std::floor(exact));
    given += q[s];
    remainders.push_back({-(exact - std::floor(exact)), s});
  }
  std::sort(remainders.begin(), remainders.end());
  for (size_t i = 0; given < kMixtureBlock; ++i, ++given) ++q[remainders[i].second];
  return q;
}
}  // namespace

MixtureLoader::MixtureLoader(std::vector<std::shared_ptr<const TokenDataset>> sources,
                             std::vector<double> weights, int seq_len, uint64_t seed,
                             SampleOrder order) {
  TRILLION_CHECK(!sources.empty() && sources.size() == weights.size(),
                 "a mixture needs one weight per source");
  for (double w : weights) {
    if (!(w > 0) || !std::isfinite(w)) {
      throw Error("every data.sources weight must be a finite number > 0");
    }
  }
  for (size_t s = 0; s < sources.size(); ++s) {
    // One source keeps the run's own seed (the stream of a plain run); the others get their own.
    const uint64_t key = s == 0 ? seed : seed ^ fnv1a64("data.mixture.source." + std::to_string(s));
    loaders_.emplace_back(sources[s], seq_len, key, order);
  }
  quota_ = quotas(weights);
  const size_t S = sources.size();
  block_source_.resize(kMixtureBlock);
  block_index_.resize(kMixtureBlock);
  block_prefix_.assign((kMixtureBlock + 1) * S, 0);
  std::vector<int64_t> credit(S, 0), taken(S, 0);
  for (int64_t r = 0; r < kMixtureBlock; ++r) {
    size_t best = 0;
    for (size_t s = 0; s < S; ++s) {
      credit[s] += quota_[s];
      if (credit[s] > credit[best]) best = s;
    }
    credit[best] -= kMixtureBlock;
    block_source_[r] = static_cast<int32_t>(best);
    block_index_[r] = static_cast<int32_t>(taken[best]++);
    for (size_t s = 0; s < S; ++s) {
      block_prefix_[(r + 1) * S + s] = block_prefix_[r * S + s] + (s == best ? 1 : 0);
    }
  }
  for (size_t s = 0; s < S; ++s) TRILLION_CHECK(taken[s] == quota_[s], "mixture quotas");
}

MixtureLoader::Draw MixtureLoader::draw(uint64_t g) const {
  const uint64_t block = g / kMixtureBlock;
  const int64_t r = static_cast<int64_t>(g % kMixtureBlock);
  const int s = block_source_[r];
  return {s, block * static_cast<uint64_t>(quota_[s]) + static_cast<uint64_t>(block_index_[r])};
}

uint64_t MixtureLoader::samples_before(uint64_t n, int s) const {
  const size_t S = loaders_.size();
  return n / kMixtureBlock * static_cast<uint64_t>(quota_.at(s)) +
         static_cast<uint64_t>(block_prefix_[(n % kMixtureBlock) * S + s]);
}

std::optional<int> MixtureLoader::exhausted_in(uint64_t first, int64_t count) const {
  for (int s = 0; s < num_sources(); ++s) {
    // The source's last sample in the range is its (samples_before(end) - 1)-th.
    const uint64_t end = samples_before(first + static_cast<uint64_t>(count), s);
    if (end > static_cast<uint64_t>(loaders_[s].num_samples())) return s;
  }
  return std::nullopt;
}

void MixtureLoader::sample(uint64_t g, int32_t* tokens, int32_t* targets) const {
  const Draw d = draw(g);
  loaders_[d.source].sample(d.index, tokens, targets);
}

void MixtureLoader::batch(uint64_t first, int batch_size, int32_t* tokens, int32_t* targets) const {
  const int64_t T = seq_len();
  for (int b = 0; b < batch_size; ++b) {
    sample(first + b, tokens + b * T, targets + b * T);
  }
}

}  // namespace trillion::data
