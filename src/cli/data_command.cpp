// `trillion data prepare|synth|inspect`: text files -> token shards with a train/validation
// split, synthetic Markov shards with their exact entropy rate, and a look inside a shard.
// Every output directory holds train.bin and val.bin (see data/shard.h for the layout).
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "cli/commands.h"
#include "cli/parse_arguments.h"
#include "core/error.h"
#include "core/philox.h"
#include "core/timer.h"
#include "data/file_io.h"
#include "data/markov.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace trillion::cli {

namespace {

void make_directory(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir, ec)) {
    throw Error("cannot create output directory '" + dir +
                "': " + (ec ? ec.message() : "a file of that name is in the way"));
  }
}

// Shards are never replaced by accident: an output directory that already holds train.bin or
// val.bin needs --overwrite. Checked before any input is read.
void check_output(const std::string& out, bool overwrite) {
  if (overwrite) return;
  for (data::Split split : {data::Split::kTrain, data::Split::kValidation}) {
    std::error_code ec;
    const std::string path = data::shard_path(out, split);
    if (std::filesystem::exists(path, ec)) {
      throw Error("'" + path + "' already exists; pass --overwrite to replace the shards in '" +
                  out + "', or choose another --out (nothing was changed)");
    }
  }
}

int prepare(data::PrepareOptions options, const std::string& format, const std::string& progress) {
  if (format != "text" && format != "jsonl")
    throw Error("--format " + format + " is unknown; give text or jsonl");
  options.format.format = format == "jsonl" ? data::InputFormat::kJsonl : data::InputFormat::kText;
  options.progress = progress == "on" || (progress == "auto" && ::isatty(2));
  check_output(options.out, options.overwrite);
  data::check_prepare_output(options.out, options.overwrite);
  const std::unique_ptr<data::TextTokenizer> tokenizer =
      data::load_text_tokenizer(options.tokenizer_path);
  const data::PrepareResult r = data::prepare_corpus(options, *tokenizer);
  if (options.val_fraction == 0) {
    std::fprintf(stderr,
                 "warning: --val-fraction 0 leaves val.bin empty; 'trillion train' needs "
                 "validation tokens from it (give --val-fraction > 0 to train on this data)\n");
  }
  if (r.bad_documents > 0) {
    std::fprintf(stderr, "skipped %lld bad documents (listed in %s)\n",
                 static_cast<long long>(r.bad_documents), r.manifest.c_str());
  }
  const int64_t tokens = r.train_tokens + r.val_tokens;
  std::printf(
      "prepared %lld documents (%lld bytes) in %.2f s on %d threads (%.1f MB/s of input, %.1f "
      "MB/s of text): train %lld tokens, val %lld tokens (%lld documents), %.3f bytes/token, "
      "vocab %d\n",
      static_cast<long long>(r.documents), static_cast<long long>(r.input_bytes), r.seconds,
      r.threads, static_cast<double>(r.input_bytes) / 1e6 / std::max(r.seconds, 1e-9),
      static_cast<double>(r.text_bytes) / 1e6 / std::max(r.seconds, 1e-9),
      static_cast<long long>(r.train_tokens), static_cast<long long>(r.val_tokens),
      static_cast<long long>(r.val_documents),
      static_cast<double>(r.text_bytes) / static_cast<double>(std::max<int64_t>(1, tokens)),
      tokenizer->vocab_size());
  std::string names;
  for (const std::string& shard : r.shards) names += (names.empty() ? "" : ", ") + shard;
  std::printf("wrote %s and %s\n", names.c_str(), r.manifest.c_str());
  return 0;
}

// A token count: a whole number, also in exponent form ("1e6"), in [0, 2^62].
int64_t parse_count(const std::string& option, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !(v >= 0) || v != std::floor(v) ||
      v > 0x1p62) {
    throw Error(option + " " + text +
                " is not a whole number of tokens >= 0 (e.g. 1000000 or 1e6)");
  }
  // Plain digits are read exactly (a double holds integers exactly only below 2^53).
  int64_t n = 0;
  const auto [rest, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec == std::errc() && rest == text.data() + text.size()) return n;
  return static_cast<int64_t>(v);
}

// synth holds a split's tokens in memory twice (int32 ids, then the shard's 2- or 4-byte copy):
// a count that cannot fit in half of this machine's memory is refused by name before anything is
// written (it ended in "out of memory ... use a smaller model", which is not the fix).
void check_synth_fits(const std::string& option, int64_t tokens, int vocab) {
  const int64_t bytes_per_token = 4 + (vocab <= 65536 ? 2 : 4);
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return;
  const double memory = static_cast<double>(pages) * static_cast<double>(page);
  const int64_t limit = static_cast<int64_t>(memory / 2 / static_cast<double>(bytes_per_token));
  if (tokens <= limit) return;
  throw Error(fmt::format(
      "{} {} is too large: data synth holds a split in memory ({} bytes a token, {:.3g} GB) and "
      "this machine has {:.3g} GB; the limit here is {} tokens (half the memory), so lower {}",
      option, tokens, bytes_per_token, static_cast<double>(tokens) * bytes_per_token / 1e9,
      memory / 1e9, limit, option));
}

int synth(const std::string& kind, data::MarkovSpec spec, const std::string& tokens,
          const std::string& val_tokens, const std::string& out, bool overwrite) {
  if (kind != "markov") throw Error("--kind " + kind + " is unknown; the only kind is markov");
  spec.tokens = parse_count("--tokens", tokens);
  spec.val_tokens = parse_count("--val-tokens", val_tokens);
  data::validate(spec);
  check_synth_fits("--tokens", spec.tokens, spec.vocab);
  check_synth_fits("--val-tokens", spec.val_tokens, spec.vocab);
  check_output(out, overwrite);
  data::check_prepare_output(out, overwrite);  // also numbered shards and a manifest
  Timer timer;
  data::MarkovChain chain(spec.order, spec.vocab, spec.seed, spec.sharpness);
  make_directory(out);
  // A manifest left by `data prepare` would name its shards instead of these train.bin/val.bin.
  std::error_code ec;
  std::filesystem::remove(std::filesystem::path(out) / data::kManifestName, ec);
  nlohmann::json meta = {{"source", "markov"},
                         {"markov",
                          {{"order", spec.order},
                           {"vocab", spec.vocab},
                           {"seed", spec.seed},
                           {"sharpness", spec.sharpness},
                           {"tokens", spec.tokens},
                           {"val_tokens", spec.val_tokens}}},
                         {"entropy_rate", chain.entropy_rate()},
                         {"entropy_rate_unit", "nats/token"},
                         {"created_by", "trillion data synth"}};
  for (data::Split split : {data::Split::kTrain, data::Split::kValidation}) {
    meta["split"] = data::split_name(split);
    int64_t count = split == data::Split::kTrain ? spec.tokens : spec.val_tokens;
    data::write_shard(data::shard_path(out, split), chain.generate(count, data::split_name(split)),
                      spec.vocab, meta);
  }
  std::printf(
      "markov order %d vocab %d seed %llu: entropy rate %.6f nats/token (log V = %.6f)\n"
      "wrote %lld train + %lld val tokens to %s in %.2f s\n",
      spec.order, spec.vocab, static_cast<unsigned long long>(spec.seed), chain.entropy_rate(),
      std::log(static_cast<double>(spec.vocab)), static_cast<long long>(spec.tokens),
      static_cast<long long>(spec.val_tokens), out.c_str(), timer.seconds());
  return 0;
}

int inspect(const std::string& path, const std::string& tokenizer_path, int64_t offset, int count) {
  data::ShardDataset dataset({path});  // verifies checksums and token range
  std::unique_ptr<data::TextTokenizer> tokenizer;
  if (!tokenizer_path.empty()) {
    tokenizer = data::load_text_tokenizer(tokenizer_path);
    if (tokenizer->vocab_size() != dataset.vocab_size()) {
      throw Error("vocabulary mismatch: tokenizer '" + tokenizer_path + "' has vocab size " +
                  std::to_string(tokenizer->vocab_size()) + " but shard '" + path +
                  "' has vocab size " + std::to_string(dataset.vocab_size()) +
                  "; use the tokenizer the data was prepared with");
    }
  }
  const data::ShardInfo& info = dataset.shards()[0];
  std::printf(
      "shard        %s\nformat       version %u, %u-byte tokens (uint%u)\n"
      "vocab size   %lld\ntokens       %lld\nchecksum     %016llx (verified)\n"
      "metadata     %s\n",
      path.c_str(), info.version, info.token_bytes, info.token_bytes * 8,
      static_cast<long long>(info.vocab_size), static_cast<long long>(info.num_tokens),
      static_cast<unsigned long long>(info.token_checksum), info.metadata.dump().c_str());
  if (info.num_tokens == 0) return 0;
  if (offset >= info.num_tokens) {
    throw Error("--offset " + std::to_string(offset) + " is past the end of the shard (" +
                std::to_string(info.num_tokens) + " tokens); give an offset below " +
                std::to_string(info.num_tokens));
  }
  const int64_t n = std::min<int64_t>(count, info.num_tokens - offset);
  std::vector<int32_t> sample(n);
  dataset.read_tokens(0, offset, n, sample.data());
  std::string ids;
  for (int32_t id : sample) ids += std::to_string(id) + " ";
  std::printf("tokens[%lld:%lld] %s\n", static_cast<long long>(offset),
              static_cast<long long>(offset + n), ids.c_str());
  if (tokenizer) {
    std::printf("decoded      %s\n",
                nlohmann::json(tokenizer->decode(sample))
                    .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                    .c_str());
  }
  return 0;
}

}  // namespace

int data_command(int argc, char** argv) {
  CLI::App app{"Prepare, synthesise and inspect token shards", "trillion data"};
  app.require_subcommand(1);

  auto* prep = app.add_subcommand("prepare", "tokenize text or JSON-lines files into shards");
  data::PrepareOptions popt;
  std::string tokenizer_path, out, format = "text", progress = "auto";
  prep->add_option("--tokenizer", popt.tokenizer_path,
                   "tokenizer: trillion JSON, Hugging Face tokenizer.json or tiktoken ranks")
      ->required();
  prep->add_option("--out", popt.out, "output directory (shards and manifest.json)")->required();
  prep->add_option("--format", format, "input format: text or jsonl")->capture_default_str();
  prep->add_option("--text-key", popt.format.text_key, "jsonl: the field holding the text")
      ->capture_default_str();
  prep->add_option("--val-fraction", popt.val_fraction, "fraction of documents held out")
      ->capture_default_str();
  prep->add_option("--seed", popt.seed, "seed of the document split")->capture_default_str();
  prep->add_option("--doc-separator", popt.format.separator,
                   "text: documents are separated by this string")
      ->capture_default_str();
  prep->add_option("--threads", popt.threads, "tokenizing threads (0: every core)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  prep->add_option("--shard-tokens", popt.shard_tokens,
                   "start a new shard once one holds this many tokens (0: one shard per split)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, INT64_MAX));
  prep->add_option("--max-bad", popt.max_bad,
                   "stop when more documents than this are bad (invalid JSON or UTF-8, no text)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, INT64_MAX));
  prep->add_option("--progress", progress, "progress line on stderr: auto (a terminal), on, off")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "on", "off"}));
  prep->add_option("inputs", popt.inputs, "files or directories (.gz and .zst allowed)")
      ->required();
  bool overwrite = false;
  prep->add_flag("--overwrite", popt.overwrite, "replace the shards if --out holds them");

  auto* syn = app.add_subcommand("synth", "write shards from a random Markov chain");
  std::string kind = "markov";
  data::MarkovSpec spec;
  syn->add_option("--kind", kind, "source kind (markov)")->capture_default_str();
  syn->add_option("--order", spec.order, "Markov order K")->capture_default_str();
  syn->add_option("--vocab", spec.vocab, "vocabulary size V")->capture_default_str();
  std::string tokens = std::to_string(spec.tokens), val_tokens = std::to_string(spec.val_tokens);
  syn->add_option("--tokens", tokens, "train tokens (1e6 allowed)")->capture_default_str();
  syn->add_option("--val-tokens", val_tokens, "validation tokens")->capture_default_str();
  syn->add_option("--seed", spec.seed, "seed of the chain and streams")->capture_default_str();
  syn->add_option("--sharpness", spec.sharpness, "row peakedness (larger: lower entropy)")
      ->capture_default_str()
      ->check(finite_positive());
  syn->add_option("--out", out, "output directory (train.bin, val.bin)")->required();
  syn->add_flag("--overwrite", overwrite, "replace train.bin and val.bin if --out holds them");

  auto* ins = app.add_subcommand("inspect", "print a shard's header and a decoded sample");
  std::string shard;
  int64_t offset = 0;
  int count = 64;
  ins->add_option("shard", shard, "shard file")->required();
  ins->add_option("--tokenizer", tokenizer_path,
                  "tokenizer (trillion JSON, tokenizer.json, tiktoken), to decode the sample");
  ins->add_option("--offset", offset, "first token of the sample")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, INT64_MAX));
  ins->add_option("--count", count, "tokens in the sample")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));

  if (const int rc = parse_arguments(app, argc, argv); rc >= 0) return rc;
  if (*prep) return prepare(popt, format, progress);
  if (*syn) return synth(kind, spec, tokens, val_tokens, out, overwrite);
  return inspect(shard, tokenizer_path, offset, count);
}

}  // namespace trillion::cli
