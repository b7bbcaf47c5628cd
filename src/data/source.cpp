// See source.h.
#include "data/source.h"

#include "core/error.h"
#include "data/shard.h"

namespace trillion::data {

std::shared_ptr<TokenDataset> open_dataset(const DataSpec& spec, Split split) {
  if (spec.source == "markov") return make_markov_dataset(spec.markov, split);
  if (spec.source == "shards") {
    if (spec.path.empty()) {
      throw Error(
          "data.source = \"shards\" needs data.path, the directory written by "
          "'trillion data prepare' or 'trillion data synth'");
    }
    return open_shard_dataset(spec.path, split);
  }
  throw Error("data.source = \"" + spec.source + "\" is unknown; use \"markov\" or \"shards\"");
}

}  // namespace trillion::data
