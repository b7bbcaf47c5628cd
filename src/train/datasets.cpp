// See datasets.h.
#include "train/datasets.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/philox.h"
#include "data/markov.h"
#include "data/shard.h"
#include "data/tokenizer.h"

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
// The shards' document-end token: their metadata's "document_end_id", else the <|eos|> of the
// tokenizer that made them (existing shards end documents with it); -1 when neither is known.
int32_t shard_document_end(const data::TokenDataset& set) {
  const auto* shards = dynamic_cast<const data::ShardDataset*>(&set);
  if (shards == nullptr || shards->shards().empty()) return -1;
  const data::ShardInfo& info = shards->shards().front();
  const nlohmann::json& m = info.metadata;
  if (m.contains("document_end_id")) {
    if (!m["document_end_id"].is_number_integer() || m["document_end_id"].get<int64_t>() < 0 ||
        m["document_end_id"].get<int64_t>() >= info.vocab_size) {
      throw Error(
          fmt::format("{}: metadata \"document_end_id\" must be a token id below the "
                      "vocabulary size {}; rewrite the shard or set data.document_end_id",
                      info.path, info.vocab_size));
    }
    return static_cast<int32_t>(m["document_end_id"].get<int64_t>());
  }
  if (!info.tokenizer) return -1;
  // The metadata names the tokenizer as `data prepare` was given it (maybe relative to where it
  // ran): try that, then beside the shard.
  namespace fs = std::filesystem;
  const fs::path named(*info.tokenizer);
  for (const fs::path& p : {named, fs::path(info.path).parent_path() / named.filename()}) {
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return data::Tokenizer::load(p.string()).eos_id();
  }
  // Shards written by `data prepare` before "document_end_id" was recorded were made by
  // trillion's BPE tokenizer, whose specials are the last three ids (<|bos|>, <|eos|>, <|pad|>).
  if (m.contains("created_by") && m["created_by"] == "trillion data prepare" &&
      info.vocab_size >= 3) {
    return static_cast<int32_t>(info.vocab_size - 2);
  }
  throw Error(
      fmt::format("{}: its tokenizer '{}' cannot be found to learn its <|eos|>; set "
                  "data.document_end_id",
                  info.path, *info.tokenizer));
}

int32_t resolve_document_end(const RunConfig& c, const RunDatasets& ds) {
  const DataConfig& d = c.data;
  const bool needed = d.document_mask || d.mask_boundary_loss;
  if (!needed) return -1;
  int32_t id = d.document_end_id >= 0 ? static_cast<int32_t>(d.document_end_id)
                                      : shard_document_end(*ds.train);
  if (id < 0 && d.source == "shards") {
    throw Error(
        fmt::format("data.document_mask / data.mask_boundary_loss: the shards in '{}' "
                    "name no document-end token (no \"document_end_id\" or tokenizer in "
                    "their metadata); set data.document_end_id",
                    d.path));
  }
  if (id >= c.model.vocab_size) {
    throw Error(fmt::format("data.document_end_id = {} is outside the model's vocabulary [0, {})",
                            id, c.model.vocab_size));
  }
  return id;
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
  } else if (d.sources.empty()) {
    ds.train = data::open_shard_dataset(d.path, data::Split::kTrain);
    ds.validation = data::open_shard_dataset(d.path, data::Split::kValidation);
  }
  for (const DataSourceConfig& sc : d.sources) {  // a mixture: source 0 stands for the data
    ds.train_sources.push_back(data::open_shard_dataset(sc.path, data::Split::kTrain));
    ds.validation_sources.push_back(data::open_shard_dataset(sc.path, data::Split::kValidation));
    ds.weights.push_back(sc.weight);
    ds.source_names.push_back(sc.path);
  }
  if (d.sources.empty()) {
    ds.train_sources = {ds.train};
    ds.validation_sources = {ds.validation};
    ds.weights = {1.0};
    ds.source_names = {d.source == "shards" ? d.path : d.source};
  } else {
    ds.train = std::const_pointer_cast<data::TokenDataset>(ds.train_sources[0]);
    ds.validation = std::const_pointer_cast<data::TokenDataset>(ds.validation_sources[0]);
  }
  const int64_t T = c.model.seq_len;
  for (const auto& sources : {ds.train_sources, ds.validation_sources}) {
    for (const auto& set : sources) {
      data::check_vocab_fits(*set, c.model.vocab_size);
      if (set->num_samples(static_cast<int>(T)) < 1) {
        throw Error(
            fmt::format("{} has {} tokens: too few for one sample of model.seq_len = {} "
                        "(+1) tokens",
                        set->describe(), set->num_tokens(), T));
      }
    }
  }
  ds.document_end_id = resolve_document_end(c, ds);
  return ds;
}

}  // namespace trillion
