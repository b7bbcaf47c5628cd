// A random order-K Markov chain over a vocabulary of V tokens, built from (order, vocab, seed)
// alone, and the token streams it emits. Invariants: the transition table, the stationary
// distribution, the entropy rate and every emitted token are pure functions of (order, vocab,
// seed, sharpness) and, for streams, of (stream name, position): `trillion data synth` and a
// config's `[data] source = "markov"` produce the same tokens. Every transition probability is
// positive, so the chain over the V^K contexts is irreducible and aperiodic: the stationary
// distribution is unique and a stream started from it is stationary from its first token.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "data/dataset.h"

namespace trillion::data {

// Rows are softmax(sharpness * z) with z standard normal (a log-normal "Dirichlet-ish" row):
// larger sharpness gives peakier rows and an entropy rate further below log V.
constexpr double kDefaultMarkovSharpness = 2.0;
constexpr double kMaxMarkovSharpness = 50.0;  // see validate(): every probability stays > 0

class MarkovChain {
 public:
  MarkovChain(int order, int vocab, uint64_t seed, double sharpness = kDefaultMarkovSharpness);

  int order() const { return order_; }
  int vocab() const { return vocab_; }
  int64_t num_contexts() const { return num_contexts_; }  // V^K

  // P(next | context), context = sum_i x_i V^(K-1-i), oldest token first.
  double probability(int64_t context, int next) const;
  // Stationary distribution over the V^K contexts (power iteration to 1e-14 in L1).
  const std::vector<double>& stationary() const { return stationary_; }
  // Exact entropy rate, nats/token: sum_c pi(c) H(P(. | c)).
  double entropy_rate() const { return entropy_rate_; }

  // `count` tokens of stream `stream` (e.g. "train", "val"): the first K tokens are a context
  // drawn from the stationary distribution, each later token is drawn from its row.
  std::vector<int32_t> generate(int64_t count, std::string_view stream) const;

 private:
  int order_;
  int vocab_;
  uint64_t seed_;
  int64_t num_contexts_;
  std::vector<double> cdf_;         // [context][V]: cumulative row, last entry 1
  std::vector<double> stationary_;  // [context]
  double entropy_rate_ = 0;
};

// What a config's `[data] source = "markov"` (or `trillion data synth --kind markov`) names.
struct MarkovSpec {
  int order = 1;
  int vocab = 64;
  uint64_t seed = 0;
  int64_t tokens = 1 << 20;      // train stream length
  int64_t val_tokens = 1 << 16;  // validation stream length
  double sharpness = kDefaultMarkovSharpness;
};

// Throws a trillion::Error naming the field and the fix when a spec is out of range.
void validate(const MarkovSpec& spec);

// The train or validation stream of `spec` as a dataset, with its entropy rate attached.
std::shared_ptr<TokenDataset> make_markov_dataset(const MarkovSpec& spec, Split split);

}  // namespace trillion::data
