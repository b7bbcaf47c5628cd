// See prepare.h. The main thread reads records and batches them; workers parse and tokenize a
// batch at a time; the main thread takes results back strictly in batch order and hands each
// document to the Sink, which splits, cuts shards and counts. With one thread the main thread
// tokenizes too, so "1 thread" means one core's work.
#include "data/prepare.h"

#include <fmt/format.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "core/error.h"
#include "core/philox.h"
#include "core/timer.h"
#include "data/file_io.h"
#include "data/shard.h"
#include "data/shard_writer.h"

namespace trillion::data {

namespace fs = std::filesystem;

namespace {
constexpr size_t kBatchBytes = 1 << 20;

struct Batch {
  std::vector<RawRecord> records;
};
struct DocumentResult {
  uint32_t file = 0;
  int64_t line = 0;
  RecordStatus status = RecordStatus::kEmpty;
  std::string reason;
  int64_t text_bytes = 0;
  size_t token_end = 0;  // this document's tokens end here in BatchResult::tokens
};
struct BatchResult {
  std::vector<DocumentResult> documents;
  std::vector<int32_t> tokens;
};

BatchResult tokenize_batch(Batch& batch, const DocumentFormat& format,
                           const TextTokenizer& tokenizer, int32_t end_id) {
  BatchResult result;
  result.documents.reserve(batch.records.size());
  std::string text;
  for (RawRecord& record : batch.records) {
    DocumentResult doc;
    doc.file = record.file;
    doc.line = record.line;
    doc.status = parse_record(format, record.bytes, text, doc.reason);
    if (doc.status == RecordStatus::kDocument) {
      tokenizer.encode_append(text, result.tokens);
      result.tokens.push_back(end_id);
      doc.text_bytes = static_cast<int64_t>(text.size());
    }
    doc.token_end = result.tokens.size();
    result.documents.push_back(std::move(doc));
    std::string().swap(record.bytes);
  }
  return result;
}

// Workers take batches in submission order and leave results keyed by batch number.
class WorkerPool {
 public:
  WorkerPool(int threads, const DocumentFormat& format, const TextTokenizer& tokenizer,
             int32_t end_id) {
    for (int t = 0; t < threads; ++t) {
      workers_.emplace_back([this, &format, &tokenizer, end_id] {
        while (true) {
          std::pair<int64_t, Batch> job;
          {
            std::unique_lock<std::mutex> lock(mutex_);
            work_ready_.wait(lock, [&] { return stop_ || !queue_.empty(); });
            if (queue_.empty()) return;
            job = std::move(queue_.front());
            queue_.pop_front();
          }
          std::optional<BatchResult> result;
          std::exception_ptr error;
          try {
            result = tokenize_batch(job.second, format, tokenizer, end_id);
          } catch (...) {
            error = std::current_exception();
          }
          std::lock_guard<std::mutex> lock(mutex_);
          if (error) error_ = error;
          if (result) results_.emplace(job.first, std::move(*result));
          result_ready_.notify_all();
        }
      });
    }
  }
  ~WorkerPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      queue_.clear();
    }
    work_ready_.notify_all();
    for (std::thread& w : workers_) w.join();
  }
  void submit(int64_t number, Batch batch) {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.emplace_back(number, std::move(batch));
    work_ready_.notify_one();
  }
  BatchResult take(int64_t number) {
    std::unique_lock<std::mutex> lock(mutex_);
    result_ready_.wait(lock, [&] { return error_ || results_.count(number) > 0; });
    if (error_) std::rethrow_exception(error_);
    auto it = results_.find(number);
    BatchResult result = std::move(it->second);
    results_.erase(it);
    return result;
  }

 private:
  std::mutex mutex_;
  std::condition_variable work_ready_, result_ready_;
  std::deque<std::pair<int64_t, Batch>> queue_;
  std::map<int64_t, BatchResult> results_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

std::string shard_name(Split split, int64_t index, bool numbered) {
  return numbered ? fmt::format("{}-{:05d}.bin", split_name(split), index)
                  : std::string(split_name(split)) + ".bin";
}

// Splits documents between train and validation, cuts shards and keeps the counts.
class Sink {
 public:
  Sink(const PrepareOptions& o, const TextTokenizer& tokenizer, std::string staging,
       nlohmann::json shard_metadata, size_t files)
      : o_(o),
        tokenizer_(tokenizer),
        staging_(std::move(staging)),
        metadata_(std::move(shard_metadata)),
        rng_(o.seed, "data.prepare.split"),
        per_file_(files) {}

  void add(const DocumentResult& doc, std::span<const int32_t> tokens,
           const std::vector<std::string>& files) {
    if (doc.status == RecordStatus::kEmpty) return;
    if (doc.status == RecordStatus::kBad) {
      ++bad_;
      ++per_file_[doc.file].bad;
      const std::string where = files[doc.file] + ":" + std::to_string(doc.line);
      if (bad_list_.size() < 100) bad_list_.push_back(where + ": " + doc.reason);
      if (bad_ <= o_.bad_reports)
        std::fprintf(stderr, "%sbad document %s: %s\n", o_.progress ? "\n" : "", where.c_str(),
                     doc.reason.c_str());
      if (bad_ > o_.max_bad) {
        throw Error(fmt::format(
            "{} bad documents, more than --max-bad {}; the first: {}. Fix the input (or choose "
            "the text field with --text-key), or raise --max-bad (nothing was written)",
            bad_, o_.max_bad, bad_list_.front()));
      }
      return;
    }
    const bool to_val = rng_.uniform(static_cast<uint64_t>(documents_)) < o_.val_fraction;
    ++documents_;
    per_file_[doc.file].documents += 1;
    per_file_[doc.file].tokens += static_cast<int64_t>(tokens.size());
    if (to_val) {
      write(split_[1], Split::kValidation, tokens, doc.text_bytes);
      ++val_documents_;
      return;
    }
    if (pending_) write(split_[0], Split::kTrain, *pending_, pending_bytes_);
    pending_.emplace(tokens.begin(), tokens.end());
    pending_bytes_ = doc.text_bytes;
  }

  // Writes what is held back and closes every shard; returns the shard paths, train first.
  std::vector<std::pair<Split, std::string>> finish() {
    if (pending_) {
      // Too few documents for the fraction to pick one: the last training document becomes val.
      const bool to_val = o_.val_fraction > 0 && val_documents_ == 0 && documents_ >= 2;
      write(split_[to_val], to_val ? Split::kValidation : Split::kTrain, *pending_, pending_bytes_);
      val_documents_ += to_val;
      pending_.reset();
    }
    std::vector<std::pair<Split, std::string>> names;
    for (Split split : {Split::kTrain, Split::kValidation}) {
      SplitState& s = split_[split == Split::kValidation];
      if (s.names.empty()) open(s, split);  // an empty split still gets its (empty) shard
      close(s, split);
      for (const std::string& name : s.names) names.emplace_back(split, name);
    }
    return names;
  }

  struct FileCounts {
    int64_t documents = 0, bad = 0, tokens = 0;
  };
  int64_t documents() const { return documents_; }
  int64_t val_documents() const { return val_documents_; }
  int64_t bad() const { return bad_; }
  int64_t tokens(Split split) const { return split_[split == Split::kValidation].tokens; }
  int64_t text_bytes(Split split) const { return split_[split == Split::kValidation].text_bytes; }
  const std::vector<FileCounts>& per_file() const { return per_file_; }
  const std::vector<std::string>& bad_list() const { return bad_list_; }
  const nlohmann::json& shard_records() const { return shard_records_; }

 private:
  struct SplitState {
    std::unique_ptr<ShardWriter> writer;
    std::vector<std::string> names;
    int64_t shard_documents = 0, shard_text_bytes = 0, tokens = 0, text_bytes = 0;
  };

  void open(SplitState& s, Split split) {
    const std::string name =
        shard_name(split, static_cast<int64_t>(s.names.size()), o_.shard_tokens > 0);
    s.writer = std::make_unique<ShardWriter>(staging_ + "/" + name, tokenizer_.vocab_size());
    s.names.push_back(name);
    s.shard_documents = s.shard_text_bytes = 0;
  }

  void close(SplitState& s, Split split) {
    if (!s.writer) return;
    nlohmann::json meta = metadata_;
    meta["split"] = split_name(split);
    meta["shard"] = static_cast<int64_t>(s.names.size()) - 1;
    meta["documents"] = s.shard_documents;
    meta["text_bytes"] = s.shard_text_bytes;
    s.writer->finish(meta);
    shard_records_.push_back({{"file", s.names.back()},
                              {"split", split_name(split)},
                              {"tokens", s.writer->tokens()},
                              {"documents", s.shard_documents},
                              {"text_bytes", s.shard_text_bytes}});
    s.writer.reset();
  }

  void write(SplitState& s, Split split, std::span<const int32_t> tokens, int64_t text_bytes) {
    if (!s.writer) open(s, split);
    s.writer->append(tokens);
    s.shard_documents += 1;
    s.shard_text_bytes += text_bytes;
    s.tokens += static_cast<int64_t>(tokens.size());
    s.text_bytes += text_bytes;
    if (o_.shard_tokens > 0 && s.writer->tokens() >= o_.shard_tokens) close(s, split);
  }

  const PrepareOptions& o_;
  const TextTokenizer& tokenizer_;
  std::string staging_;
  nlohmann::json metadata_;
  Philox rng_;
  SplitState split_[2];
  std::optional<std::vector<int32_t>> pending_;
  int64_t pending_bytes_ = 0, documents_ = 0, val_documents_ = 0, bad_ = 0;
  std::vector<FileCounts> per_file_;
  std::vector<std::string> bad_list_;
  nlohmann::json shard_records_ = nlohmann::json::array();
};

std::string format_seconds(double s) {
  if (!(s >= 0) || s > 1e7) return "?";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  return t >= 3600 ? fmt::format("{}h{:02d}m", t / 3600, t / 60 % 60)
                   : fmt::format("{}m{:02d}s", t / 60, t % 60);
}

class Progress {
 public:
  explicit Progress(bool on) : on_(on) {}
  void update(const DocumentReader& reader, int64_t documents, int64_t bad, bool last = false) {
    if (!on_) return;
    const double now = timer_.seconds();
    if (!last && now - shown_ < 0.5) return;
    shown_ = now;
    const double done = static_cast<double>(reader.consumed_bytes());
    const double total = std::max<double>(1, static_cast<double>(reader.total_bytes()));
    const double rate = done / std::max(now, 1e-9);
    std::fprintf(stderr,
                 "\rprepare: %.1f / %.1f MB (%3.0f%%)  %.1f MB/s  ETA %s  %lld docs  %lld bad ",
                 done / 1e6, total / 1e6, 100 * std::min(1.0, done / total), rate / 1e6,
                 format_seconds((total - done) / std::max(rate, 1.0)).c_str(),
                 static_cast<long long>(documents), static_cast<long long>(bad));
    if (last) std::fprintf(stderr, "\n");
  }

 private:
  bool on_;
  Timer timer_;
  double shown_ = -1;
};

// Removes the staging directory unless the output was moved into place.
struct StagingGuard {
  std::string path;
  bool keep = false;
  ~StagingGuard() {
    std::error_code ec;
    if (!keep) fs::remove_all(path, ec);
  }
};

bool is_prepare_output(const std::string& name) {
  if (name == kManifestName || name == "train.bin" || name == "val.bin") return true;
  for (const char* prefix : {"train-", "val-"}) {
    const std::string p = prefix;
    if (name.size() == p.size() + 9 && name.starts_with(p) && name.ends_with(".bin") &&
        name.find_first_not_of("0123456789", p.size()) == p.size() + 5)
      return true;
  }
  return false;
}

void make_output_directory(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec)) {
    throw Error("cannot create output directory '" + dir +
                "': " + (ec ? ec.message() : "a file of that name is in the way"));
  }
}
}  // namespace

void check_prepare_output(const std::string& out, bool overwrite) {
  std::error_code ec;
  if (overwrite || !fs::is_directory(out, ec)) return;
  for (const auto& entry : fs::directory_iterator(out, ec)) {
    if (is_prepare_output(entry.path().filename().string())) {
      throw Error("'" + entry.path().string() +
                  "' already exists; pass --overwrite to replace the shards in '" + out +
                  "', or choose another --out (nothing was changed)");
    }
  }
}

namespace {
// The metadata every shard of this run carries (the split, shard index and counts are added per
// shard). The input list is left to the manifest when it would not fit the reserved bytes.
nlohmann::json shard_metadata(const PrepareOptions& o, const TextTokenizer& tokenizer,
                              const std::string& tokenizer_hash, int32_t end_id,
                              const std::vector<std::string>& files) {
  nlohmann::json meta = {{"source", o.format.format == InputFormat::kJsonl ? "jsonl" : "text"},
                         {"tokenizer", o.tokenizer_path},
                         {"tokenizer_format", tokenizer.format()},
                         {"tokenizer_hash", tokenizer_hash},
                         {"document_end_id", end_id},
                         {"val_fraction", o.val_fraction},
                         {"seed", o.seed},
                         {"created_by", "trillion data prepare"},
                         {"manifest", kManifestName}};
  meta["inputs"] = files;
  if (meta.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).size() + 512 >
      static_cast<size_t>(kStreamedShardMetadataBytes)) {
    meta["inputs"] = fmt::format("{} files, listed in {}", files.size(), kManifestName);
  }
  return meta;
}

// manifest.json: what was read (per source), what was written (per shard) and with which
// tokenizer.
nlohmann::json manifest_json(const PrepareOptions& o, const TextTokenizer& tokenizer,
                             const std::string& tokenizer_hash, int32_t end_id,
                             const std::vector<std::string>& files, const DocumentReader& reader,
                             const Sink& sink) {
  nlohmann::json sources = nlohmann::json::array();
  for (size_t f = 0; f < files.size(); ++f) {
    std::error_code ec;
    const auto size = fs::file_size(files[f], ec);
    sources.push_back({{"path", files[f]},
                       {"compression", f < reader.compressions().size() ? reader.compressions()[f]
                                                                        : std::string("?")},
                       {"bytes", ec ? 0 : static_cast<int64_t>(size)},
                       {"documents", sink.per_file()[f].documents},
                       {"bad_documents", sink.per_file()[f].bad},
                       {"tokens", sink.per_file()[f].tokens}});
  }
  return {
      {"format", "trillion-prepared-data"},
      {"version", 1},
      {"created_by", "trillion data prepare"},
      {"input_format", o.format.format == InputFormat::kJsonl ? "jsonl" : "text"},
      {"text_key", o.format.text_key},
      {"doc_separator", o.format.separator},
      {"tokenizer",
       {{"path", o.tokenizer_path},
        {"format", tokenizer.format()},
        {"hash", tokenizer_hash},
        {"vocab_size", tokenizer.vocab_size()},
        {"document_end_id", end_id}}},
      {"sources", sources},
      {"documents", sink.documents()},
      {"val_documents", sink.val_documents()},
      {"bad_documents", sink.bad()},
      {"bad_examples", sink.bad_list()},
      {"tokens", {{"train", sink.tokens(Split::kTrain)}, {"val", sink.tokens(Split::kValidation)}}},
      {"text_bytes",
       {{"train", sink.text_bytes(Split::kTrain)}, {"val", sink.text_bytes(Split::kValidation)}}},
      {"val_fraction", o.val_fraction},
      {"seed", o.seed},
      {"shard_tokens", o.shard_tokens},
      {"shards", sink.shard_records()}};
}

// Moves the finished shards and the manifest from `staging` into `out` (the manifest last),
// removing the shards an earlier prepare left there (only with --overwrite, checked before).
void publish(const std::string& staging, const std::string& out,
             const std::vector<std::pair<Split, std::string>>& shards) {
  make_output_directory(out);
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(out, ec)) {
    if (is_prepare_output(entry.path().filename().string())) fs::remove(entry.path(), ec);
  }
  std::vector<std::string> names;
  for (const auto& [split, name] : shards) names.push_back(name);
  names.push_back(kManifestName);
  for (const std::string& name : names) {
    fs::rename(staging + "/" + name, fs::path(out) / name, ec);
    if (ec)
      throw Error("cannot move '" + staging + "/" + name + "' into '" + out + "': " + ec.message());
  }
}
}  // namespace

PrepareResult prepare_corpus(const PrepareOptions& o, const TextTokenizer& tokenizer) {
  if (!(o.val_fraction >= 0 && o.val_fraction < 1)) {
    throw Error("--val-fraction " + std::to_string(o.val_fraction) + " must be in [0, 1)");
  }
  check_prepare_output(o.out, o.overwrite);
  const int32_t end_id = require_document_end_id(tokenizer, o.tokenizer_path);
  const std::vector<std::string> files = expand_input_paths(o.inputs);
  const std::string tokenizer_hash = tokenizer_file_hash(o.tokenizer_path);
  Timer timer;
  PrepareResult r;
  r.threads = o.threads > 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency());

  const fs::path out_path = fs::absolute(o.out).lexically_normal();
  StagingGuard staging{(out_path.parent_path() /
                        (out_path.filename().string() + ".prepare-" + std::to_string(::getpid())))
                           .string()};
  fs::remove_all(staging.path);
  make_output_directory(staging.path);

  DocumentReader reader(files, o.format);
  Sink sink(o, tokenizer, staging.path, shard_metadata(o, tokenizer, tokenizer_hash, end_id, files),
            files.size());
  Progress progress(o.progress);
  auto consume = [&](const BatchResult& result) {
    size_t begin = 0;
    for (const DocumentResult& doc : result.documents) {
      sink.add(doc, std::span<const int32_t>(result.tokens.data() + begin, doc.token_end - begin),
               files);
      begin = doc.token_end;
    }
    progress.update(reader, sink.documents(), sink.bad());
  };
  auto next_batch = [&](Batch& batch) {
    size_t bytes = 0;
    RawRecord record;
    while (bytes < kBatchBytes && reader.next(record)) {
      bytes += record.bytes.size();
      batch.records.push_back(std::move(record));
    }
    return !batch.records.empty();
  };
  if (r.threads == 1) {
    for (Batch batch; next_batch(batch); batch = Batch()) {
      consume(tokenize_batch(batch, o.format, tokenizer, end_id));
    }
  } else {
    WorkerPool pool(r.threads, o.format, tokenizer, end_id);
    const int64_t max_in_flight = 2 * r.threads;
    int64_t submitted = 0, taken = 0;
    bool more = true;
    while (more || taken < submitted) {
      while (more && submitted - taken < max_in_flight) {
        Batch batch;
        more = next_batch(batch);
        if (more) pool.submit(submitted++, std::move(batch));
      }
      if (taken < submitted) consume(pool.take(taken++));
    }
  }
  progress.update(reader, sink.documents(), sink.bad(), true);

  if (sink.documents() == 0) {
    throw Error(sink.bad() > 0 ? fmt::format("no documents: all {} records were bad (the first: "
                                             "{}); nothing was written",
                                             sink.bad(), sink.bad_list().front())
                               : "the input files contain no text; pass non-empty text files");
  }
  if (o.val_fraction > 0 && sink.documents() == 1) {
    // One document cannot be split: val.bin would be empty, and training refuses an empty split.
    const std::string quoted = nlohmann::json(o.format.separator)
                                   .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    throw Error(
        "the input is one document (documents are separated by --doc-separator, now \"" +
        quoted.substr(1, quoted.size() - 2) +
        "\"), so the validation split would be empty and training could not use it; split the "
        "text into documents (e.g. --doc-separator $'\\n' in bash: one document per line) or "
        "add more files (nothing was written)");
  }
  const auto shards = sink.finish();

  const nlohmann::json manifest =
      manifest_json(o, tokenizer, tokenizer_hash, end_id, files, reader, sink);
  write_file_atomic(staging.path + "/" + kManifestName,
                    {manifest.dump(1, ' ', false, nlohmann::json::error_handler_t::replace), "\n"});
  publish(staging.path, o.out, shards);

  r.documents = sink.documents();
  r.val_documents = sink.val_documents();
  r.bad_documents = sink.bad();
  r.input_bytes = reader.total_bytes();
  r.text_bytes = sink.text_bytes(Split::kTrain) + sink.text_bytes(Split::kValidation);
  r.train_tokens = sink.tokens(Split::kTrain);
  r.val_tokens = sink.tokens(Split::kValidation);
  for (const auto& [split, name] : shards) r.shards.push_back((fs::path(o.out) / name).string());
  r.manifest = (fs::path(o.out) / kManifestName).string();
  r.seconds = timer.seconds();
  return r;
}

}  // namespace trillion::data
