// See markov.h. The transition table holds V^(K+1) doubles, so the spec is capped at 2^24
// entries (128 MiB); the stationary distribution is found by power iteration, which converges
// geometrically because every transition probability is positive.
#include "data/markov.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "core/philox.h"

namespace trillion::data {

namespace {
constexpr int64_t kMaxTableEntries = int64_t{1} << 24;

int64_t checked_power(int64_t base, int exponent) {
  int64_t result = 1;
  for (int i = 0; i < exponent; ++i) {
    if (result > kMaxTableEntries / base) return kMaxTableEntries + 1;
    result *= base;
  }
  return result;
}
}  // namespace

void validate(const MarkovSpec& spec) {
  auto fail = [](const std::string& field, const std::string& value, const std::string& fix) {
    throw Error("markov source: " + field + " = " + value + " is invalid; " + fix);
  };
  if (spec.order < 1) fail("order", std::to_string(spec.order), "use order >= 1");
  if (spec.vocab < 2) fail("vocab", std::to_string(spec.vocab), "use vocab >= 2");
  if (checked_power(spec.vocab, spec.order + 1) > kMaxTableEntries) {
    fail("vocab", std::to_string(spec.vocab),
         "vocab^(order+1) must be <= 2^24 (the transition table); lower vocab or order");
  }
  if (spec.tokens < spec.order + 2) {
    fail("tokens", std::to_string(spec.tokens), "use tokens >= order + 2");
  }
  if (spec.val_tokens < 0) fail("val_tokens", std::to_string(spec.val_tokens), "use >= 0");
  if (!(spec.sharpness > 0) || !std::isfinite(spec.sharpness)) {
    fail("sharpness", fmt::format("{}", spec.sharpness), "use a positive number such as 2");
  }
  // Philox normals lie within |z| < 6.8 (the open-interval uniforms bound Box-Muller), so a row's
  // smallest weight is at least exp(-sharpness * 13.6) / V; sharpness <= 50 keeps it a positive
  // normal double, so every p log p term of the entropy rate is finite (at 1e308 the logits
  // overflowed and the entropy rate was NaN). Such rows are already nearly deterministic.
  if (spec.sharpness > kMaxMarkovSharpness) {
    fail("sharpness", fmt::format("{}", spec.sharpness),
         "use sharpness <= 50 (larger values underflow transition probabilities to 0)");
  }
}

MarkovChain::MarkovChain(int order, int vocab, uint64_t seed, double sharpness)
    : order_(order), vocab_(vocab), seed_(seed) {
  validate(MarkovSpec{order, vocab, seed, order + 2, 0, sharpness});
  num_contexts_ = checked_power(vocab, order);
  const int64_t v = vocab;
  cdf_.resize(num_contexts_ * v);
  std::vector<double> row_entropy(num_contexts_);
  Philox rng(seed, "data.markov.transitions");
  std::vector<double> row(v);
  for (int64_t c = 0; c < num_contexts_; ++c) {
    double max_logit = -1e300;
    for (int64_t y = 0; y < v; ++y) {
      row[y] = sharpness * rng.normal(static_cast<uint64_t>(c * v + y));
      max_logit = std::max(max_logit, row[y]);
    }
    double total = 0;
    for (double& w : row) total += (w = std::exp(w - max_logit));
    double h = 0, cumulative = 0;
    for (int64_t y = 0; y < v; ++y) {
      double p = row[y] / total;
      h -= p * std::log(p);
      cumulative += p;
      cdf_[c * v + y] = cumulative;
    }
    cdf_[c * v + v - 1] = 1.0;  // guard the inverse-CDF search against rounding
    row_entropy[c] = h;
  }

  // Power iteration: pi'((x2..xK, y)) += pi((x1..xK)) P(y | x1..xK).
  stationary_.assign(num_contexts_, 1.0 / static_cast<double>(num_contexts_));
  std::vector<double> next(num_contexts_);
  for (int iteration = 0; iteration < 100000; ++iteration) {
    std::fill(next.begin(), next.end(), 0.0);
    for (int64_t c = 0; c < num_contexts_; ++c) {
      int64_t shifted = (c * v) % num_contexts_;
      for (int64_t y = 0; y < v; ++y) next[shifted + y] += stationary_[c] * probability(c, y);
    }
    double total = 0, change = 0;
    for (double p : next) total += p;
    for (int64_t c = 0; c < num_contexts_; ++c) {
      next[c] /= total;
      change += std::abs(next[c] - stationary_[c]);
    }
    stationary_.swap(next);
    if (change < 1e-14) break;
  }
  entropy_rate_ = 0;
  for (int64_t c = 0; c < num_contexts_; ++c) entropy_rate_ += stationary_[c] * row_entropy[c];
  TRILLION_CHECK(std::isfinite(entropy_rate_), "markov entropy rate is not finite");
}

double MarkovChain::probability(int64_t context, int next) const {
  const double* row = &cdf_[context * vocab_];
  return next == 0 ? row[0] : row[next] - row[next - 1];
}

std::vector<int32_t> MarkovChain::generate(int64_t count, std::string_view stream) const {
  Philox rng(seed_, "data.markov.stream." + std::string(stream));
  std::vector<int32_t> tokens(std::max<int64_t>(count, 0));
  if (count <= 0) return tokens;
  // The initial context, from the stationary distribution.
  double u = rng.uniform(0), cumulative = 0;
  int64_t context = num_contexts_ - 1;
  for (int64_t c = 0; c < num_contexts_; ++c) {
    cumulative += stationary_[c];
    if (u < cumulative) {
      context = c;
      break;
    }
  }
  for (int i = order_ - 1, c = static_cast<int>(context); i >= 0; --i, c /= vocab_) {
    if (i < count) tokens[i] = c % vocab_;
  }
  for (int64_t i = order_; i < count; ++i) {
    const double* row = &cdf_[context * vocab_];
    double r = rng.uniform(static_cast<uint64_t>(i));
    int32_t y = static_cast<int32_t>(std::upper_bound(row, row + vocab_ - 1, r) - row);
    tokens[i] = y;
    context = (context * vocab_ + y) % num_contexts_;
  }
  return tokens;
}

std::shared_ptr<TokenDataset> make_markov_dataset(const MarkovSpec& spec, Split split) {
  validate(spec);
  MarkovChain chain(spec.order, spec.vocab, spec.seed, spec.sharpness);
  int64_t count = split == Split::kTrain ? spec.tokens : spec.val_tokens;
  std::string description = "markov(order=" + std::to_string(spec.order) +
                            ", vocab=" + std::to_string(spec.vocab) +
                            ", seed=" + std::to_string(spec.seed) + ") " + split_name(split);
  return std::make_shared<InMemoryDataset>(chain.generate(count, split_name(split)), spec.vocab,
                                           description, chain.entropy_rate());
}

}  // namespace trillion::data
