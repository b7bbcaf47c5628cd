// Markov source: exact entropy rate against an empirical estimate, determinism, API/CLI parity
// of the in-memory source, stationarity, and clear errors for bad specs.
#include "data/markov.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "core/error.h"

using namespace trillion;
using namespace trillion::data;

namespace {
// Plug-in conditional entropy H(X_t | previous `order` tokens) of a sample, nats.
double empirical_conditional_entropy(const std::vector<int32_t>& tokens, int order, int vocab) {
  std::map<int64_t, std::vector<int64_t>> counts;
  int64_t total = 0;
  for (size_t i = order; i < tokens.size(); ++i) {
    int64_t context = 0;
    for (int k = order; k >= 1; --k) context = context * vocab + tokens[i - k];
    auto& row = counts[context];
    row.resize(vocab);
    ++row[tokens[i]];
    ++total;
  }
  double h = 0;
  for (auto& [context, row] : counts) {
    int64_t n = 0;
    for (int64_t c : row) n += c;
    for (int64_t c : row) {
      if (c > 0) h -= static_cast<double>(c) / total * std::log(static_cast<double>(c) / n);
    }
  }
  return h;
}
}  // namespace

TEST(Markov, EntropyRateMatchesEmpiricalEstimateOrder1) {
  MarkovChain chain(1, 16, 7);
  std::vector<int32_t> tokens = chain.generate(2'000'000, "train");
  double empirical = empirical_conditional_entropy(tokens, 1, 16);
  // Plug-in bias is about -(V-1)V/(2N) = -6e-5 nats here; sampling noise is ~1e-3.
  EXPECT_NEAR(empirical, chain.entropy_rate(), 5e-3);
  EXPECT_LT(chain.entropy_rate(), std::log(16.0) - 0.5);  // peaked rows
}

TEST(Markov, EntropyRateMatchesEmpiricalEstimateOrder2) {
  MarkovChain chain(2, 8, 3);
  std::vector<int32_t> tokens = chain.generate(2'000'000, "train");
  EXPECT_NEAR(empirical_conditional_entropy(tokens, 2, 8), chain.entropy_rate(), 5e-3);
}

TEST(Markov, StationaryDistributionIsFixedPoint) {
  MarkovChain chain(2, 5, 11);
  const auto& pi = chain.stationary();
  double sum = 0;
  for (double p : pi) sum += p;
  EXPECT_NEAR(sum, 1.0, 1e-12);
  std::vector<double> next(chain.num_contexts(), 0.0);
  for (int64_t c = 0; c < chain.num_contexts(); ++c) {
    for (int y = 0; y < 5; ++y)
      next[(c * 5 + y) % chain.num_contexts()] += pi[c] * chain.probability(c, y);
  }
  for (int64_t c = 0; c < chain.num_contexts(); ++c) EXPECT_NEAR(next[c], pi[c], 1e-12);
}

TEST(Markov, StreamsAreDeterministicAndDistinct) {
  MarkovChain a(1, 64, 42), b(1, 64, 42), c(1, 64, 43);
  EXPECT_EQ(a.entropy_rate(), b.entropy_rate());
  EXPECT_NE(a.entropy_rate(), c.entropy_rate());
  EXPECT_EQ(a.generate(10000, "train"), b.generate(10000, "train"));
  EXPECT_NE(a.generate(10000, "train"), a.generate(10000, "val"));
  // A prefix of a longer stream is the shorter stream.
  std::vector<int32_t> longer = a.generate(20000, "train");
  longer.resize(10000);
  EXPECT_EQ(longer, a.generate(10000, "train"));
}

TEST(Markov, DatasetCarriesEntropyRateAndSplits) {
  MarkovSpec spec{.order = 1, .vocab = 64, .seed = 5, .tokens = 5000, .val_tokens = 700};
  auto train = make_markov_dataset(spec, Split::kTrain);
  auto val = make_markov_dataset(spec, Split::kValidation);
  EXPECT_EQ(train->num_tokens(), 5000);
  EXPECT_EQ(val->num_tokens(), 700);
  EXPECT_EQ(train->vocab_size(), 64);
  ASSERT_TRUE(train->entropy_rate().has_value());
  EXPECT_DOUBLE_EQ(*train->entropy_rate(), MarkovChain(1, 64, 5).entropy_rate());
  EXPECT_NEAR(*train->entropy_rate(), 2.4, 0.6);  // well below log 64 = 4.16
}

TEST(Markov, BadSpecsGiveClearErrors) {
  auto message = [](MarkovSpec spec) {
    try {
      validate(spec);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message({.order = 0}).find("order = 0"), std::string::npos);
  EXPECT_NE(message({.vocab = 1}).find("vocab = 1"), std::string::npos);
  EXPECT_NE(message({.order = 4, .vocab = 256}).find("2^24"), std::string::npos);
  EXPECT_NE(message({.tokens = 1}).find("tokens = 1"), std::string::npos);
}
