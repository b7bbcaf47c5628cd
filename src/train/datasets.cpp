// See datasets.h.
#include "train/datasets.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "core/philox.h"
#include "data/markov.h"
#include "data/shard.h"

namespace trillion {

namespace {
std::shared_ptr<data::TokenDataset> random_dataset(const DataConfig& d, int64_t n,
                                                   const char* stream) {
  std::vector<int32_t> tokens(n);
  const Philox rng(d.seed, std::string("random-tokens:") + stream);
  for (int64_t i = 0; i < n; ++i) tokens[i] = static_cast<int32_t>(rng.below(i, d.vocab));
  return std::make_shared<data::InMemoryDataset>(
      std::move(tokens), d.vocab,
      fmt::format("uniform random tokens ({}, vocab {})", stream, d.vocab),
      std::log(static_cast<double>(d.vocab)));
}
}  // namespace

RunDatasets open_run_datasets(const RunConfig& c) {
  const DataConfig& d = c.data;
  RunDatasets ds;
  if (d.source == "random") {
    ds.train = random_dataset(d, d.tokens, "train");
    ds.validation = random_dataset(d, d.val_tokens, "val");
  } else if (d.source == "markov") {
    data::MarkovSpec spec;
    spec.order = static_cast<int>(d.order);
    spec.vocab = static_cast<int>(d.vocab);
    spec.seed = d.seed;
    spec.tokens = d.tokens;
    spec.val_tokens = d.val_tokens;
    spec.sharpness = d.sharpness;
    data::validate(spec);
    ds.train = data::make_markov_dataset(spec, data::Split::kTrain);
    ds.validation = data::make_markov_dataset(spec, data::Split::kValidation);
  } else {
    ds.train = data::open_shard_dataset(d.path, data::Split::kTrain);
    ds.validation = data::open_shard_dataset(d.path, data::Split::kValidation);
  }
  data::check_vocab_fits(*ds.train, c.model.vocab_size);
  data::check_vocab_fits(*ds.validation, c.model.vocab_size);
  const int64_t T = c.model.seq_len;
  for (const auto& set : {ds.train, ds.validation}) {
    if (set->num_samples(static_cast<int>(T)) < 1) {
      throw Error(
          fmt::format("{} has {} tokens: too few for one sample of model.seq_len = {} "
                      "(+1) tokens",
                      set->describe(), set->num_tokens(), T));
    }
  }
  return ds;
}

}  // namespace trillion
