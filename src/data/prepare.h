// `trillion data prepare` as a library function: a document stream (data/document_reader.h)
// tokenized on worker threads into train/validation shards, with a manifest. Invariants: the
// output bytes depend only on the inputs and options, never on the thread count (workers
// tokenize batches, one writer takes them back in input order); document d goes to validation
// iff Philox(seed, "data.prepare.split").uniform(d) < val_fraction, d counting good documents;
// every document ends with the tokenizer's document-end token, and each shard's metadata records
// it as "document_end_id"; shards are cut only between documents; memory is bounded by the
// batches in flight (about 3 x threads MB of text, ids and records), the tokenizer and its
// per-thread piece caches, and the longest document, whatever the corpus size; nothing appears
// in `out` until every shard is complete (they are written to a staging directory beside it and
// moved in at the end), and a failure leaves `out` as it was.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/document_reader.h"
#include "data/text_tokenizer.h"

namespace trillion::data {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files and directories
  std::string out;
  std::string tokenizer_path;
  DocumentFormat format;
  double val_fraction = 0.05;
  uint64_t seed = 0;
  int threads = 0;           // 0: every core
  int64_t shard_tokens = 0;  // > 0: a new shard once one holds this many tokens; 0: one per split
  int64_t max_bad = 1000;    // more bad documents than this stops the run (nothing is written)
  int bad_reports = 10;      // bad documents reported one by one on stderr
  bool progress = false;     // a progress line on stderr
  bool overwrite = false;
};

struct PrepareResult {
  int64_t documents = 0, val_documents = 0, bad_documents = 0;
  int64_t input_bytes = 0, text_bytes = 0;
  int64_t train_tokens = 0, val_tokens = 0;
  int threads = 1;
  double seconds = 0;
  std::vector<std::string> shards;  // paths written, train first
  std::string manifest;
};

// The manifest's file name inside an output directory.
constexpr const char* kManifestName = "manifest.json";

// Throws before reading any input when `out` holds shards or a manifest and !overwrite.
void check_prepare_output(const std::string& out, bool overwrite);

PrepareResult prepare_corpus(const PrepareOptions& options, const TextTokenizer& tokenizer);

}  // namespace trillion::data
