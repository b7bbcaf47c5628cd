// One entry point from a run config's [data] section to datasets. Invariant: a synthetic source
// yields exactly the tokens `trillion data synth` writes for the same keys, so a test can train
// on `source = "markov"` without shard files and get the same run as from the shards.
#pragma once

#include <memory>
#include <string>

#include "data/dataset.h"
#include "data/markov.h"

namespace trillion::data {

struct DataSpec {
  std::string source = "markov";  // "markov" (in memory) or "shards" (a prepared directory)
  MarkovSpec markov;              // used when source == "markov"
  std::string path;               // used when source == "shards": holds train.bin and val.bin
};

// Throws a trillion::Error naming the key and its allowed values for an unknown source.
std::shared_ptr<TokenDataset> open_dataset(const DataSpec& spec, Split split);

}  // namespace trillion::data
