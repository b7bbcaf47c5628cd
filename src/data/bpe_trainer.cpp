// BPE training (Sennrich et al. 2016, byte-level as in GPT-2). The corpus is reduced to its
// unique pre-tokenized chunks with counts; pair counts are kept in a table plus a max-heap with
// lazy deletion, and each merge rewrites only the chunks that contain the merged pair, updating
// the counts of the pairs it destroys and creates (no full recount per merge). Ties between
// equal counts go to the smaller (left, right) id pair, so training is deterministic.
#include <algorithm>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "core/timer.h"
#include "data/pretokenize.h"
#include "data/tokenizer.h"

namespace trillion::data {

namespace {

uint64_t key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct HeapEntry {
  int64_t count;
  uint64_t pair;
  // priority_queue pops the largest: higher count first, then the smaller pair.
  bool operator<(const HeapEntry& other) const {
    return count != other.count ? count < other.count : pair > other.pair;
  }
};

struct Word {
  std::vector<int32_t> symbols;
  int64_t count;
};

}  // namespace

Tokenizer Tokenizer::train(std::span<const std::string> texts, int vocab_size,
                           BpeTrainStats* stats) {
  if (vocab_size < kMinVocabSize) {
    throw Error("tokenizer vocab size " + std::to_string(vocab_size) + " is too small: it must " +
                "be >= " + std::to_string(kMinVocabSize) + " (256 bytes + 3 special tokens)");
  }
  Timer timer;
  BpeTrainStats local;
  std::unordered_map<std::string_view, int64_t> chunk_counts;
  for (const std::string& text : texts) {
    local.corpus_bytes += static_cast<int64_t>(text.size());
    pretokenize(text, [&](std::string_view chunk) {
      ++chunk_counts[chunk];
      ++local.chunks;
    });
  }
  // Sorted so that word indices (and hence everything after) do not depend on hash order.
  std::vector<std::pair<std::string_view, int64_t>> sorted(chunk_counts.begin(),
                                                           chunk_counts.end());
  std::sort(sorted.begin(), sorted.end());
  local.unique_chunks = static_cast<int64_t>(sorted.size());

  std::vector<Word> words;
  words.reserve(sorted.size());
  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<int32_t>> pair_words;  // may hold stale entries
  for (const auto& [chunk, count] : sorted) {
    Word w{{}, count};
    for (unsigned char c : chunk) w.symbols.push_back(c);
    int32_t index = static_cast<int32_t>(words.size());
    for (size_t i = 0; i + 1 < w.symbols.size(); ++i) {
      uint64_t p = key(w.symbols[i], w.symbols[i + 1]);
      pair_count[p] += count;
      pair_words[p].push_back(index);
    }
    words.push_back(std::move(w));
  }
  std::priority_queue<HeapEntry> heap;
  for (const auto& [p, c] : pair_count) heap.push({c, p});

  std::vector<std::pair<int32_t, int32_t>> merges;
  const int target_merges = vocab_size - kMinVocabSize;
  std::unordered_map<uint64_t, int64_t> delta;
  std::vector<int32_t> rewritten;
  while (static_cast<int>(merges.size()) < target_merges && !heap.empty()) {
    HeapEntry top = heap.top();
    heap.pop();
    auto found = pair_count.find(top.pair);
    if (found == pair_count.end() || found->second != top.count) continue;  // stale entry
    if (top.count < 2) break;  // merging a pair seen once only memorises the corpus
    const int32_t a = static_cast<int32_t>(top.pair >> 32);
    const int32_t b = static_cast<int32_t>(top.pair & 0xffffffffu);
    const int32_t merged = 256 + static_cast<int32_t>(merges.size());
    merges.emplace_back(a, b);

    std::vector<int32_t> affected = std::move(pair_words[top.pair]);
    pair_words.erase(top.pair);
    std::sort(affected.begin(), affected.end());
    affected.erase(std::unique(affected.begin(), affected.end()), affected.end());
    delta.clear();
    for (int32_t index : affected) {
      Word& w = words[index];
      const std::vector<int32_t>& s = w.symbols;
      bool present = false;
      for (size_t i = 0; i + 1 < s.size() && !present; ++i) present = s[i] == a && s[i + 1] == b;
      if (!present) continue;
      for (size_t i = 0; i + 1 < s.size(); ++i) delta[key(s[i], s[i + 1])] -= w.count;
      rewritten.clear();
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          rewritten.push_back(merged);
          ++i;
        } else {
          rewritten.push_back(s[i]);
        }
      }
      w.symbols.swap(rewritten);
      for (size_t i = 0; i + 1 < w.symbols.size(); ++i) {
        uint64_t p = key(w.symbols[i], w.symbols[i + 1]);
        delta[p] += w.count;
        if (w.symbols[i] == merged || w.symbols[i + 1] == merged) pair_words[p].push_back(index);
      }
    }
    // Sorted for a deterministic heap push order (equal entries are interchangeable anyway).
    std::vector<std::pair<uint64_t, int64_t>> changes(delta.begin(), delta.end());
    std::sort(changes.begin(), changes.end());
    for (const auto& [p, d] : changes) {
      if (d == 0) continue;
      int64_t& c = pair_count[p];
      c += d;
      if (c <= 0) {
        pair_count.erase(p);
      } else {
        heap.push({c, p});
      }
    }
    pair_count.erase(top.pair);
  }
  local.merges = static_cast<int64_t>(merges.size());
  local.seconds = timer.seconds();
  if (stats != nullptr) *stats = local;
  return Tokenizer(std::move(merges));
}

}  // namespace trillion::data
