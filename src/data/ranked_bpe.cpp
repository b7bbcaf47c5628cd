// See ranked_bpe.h. A piece's merges run on a linked list of symbols with a min-heap of
// (rank, position) pairs checked when popped, so a long piece costs O(n log n), not O(n^2).
// Pieces are cached per thread (no lock on the hot path; natural text repeats its words).
#include "data/ranked_bpe.h"

#include <algorithm>
#include <atomic>
#include <queue>
#include <tuple>

#include "core/error.h"
#include "data/byte_level.h"

namespace trillion::data {

namespace {
constexpr size_t kMaxCachedPieceBytes = 64;
constexpr size_t kMaxCacheEntries = 1 << 18;
std::atomic<uint64_t> next_instance{1};

struct PieceHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
struct PieceCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<int32_t>, PieceHash, std::equal_to<>> entries;
};
thread_local PieceCache piece_cache;
}  // namespace

RankedBpe::RankedBpe(Spec spec) : spec_(std::move(spec)), instance_(next_instance++) {
  TRILLION_CHECK(spec_.kinds.size() == spec_.token_bytes.size(), "one kind per token");
  if (spec_.ignore_merges) {
    for (size_t id = 0; id < spec_.token_bytes.size(); ++id) {
      if (spec_.kinds[id] == TokenKind::kNormal && !spec_.fallback_byte.contains(id))
        whole_tokens_.emplace(spec_.token_bytes[id], static_cast<int32_t>(id));
    }
  }
}

void RankedBpe::merge_piece(std::string_view piece, std::vector<int32_t>& out) const {
  std::vector<int32_t> ids;
  ids.reserve(piece.size());
  for (const char ch : piece) {
    const auto b = static_cast<unsigned char>(ch);
    if (spec_.byte_ids[b] >= 0)
      ids.push_back(spec_.byte_ids[b]);
    else
      ids.insert(ids.end(), spec_.fallback_ids[b].begin(), spec_.fallback_ids[b].end());
  }
  const int n = static_cast<int>(ids.size());
  std::vector<int32_t> next(n), prev(n);
  for (int i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  struct Candidate {
    int32_t rank, pos, left, right;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int pos) {
    if (pos < 0 || next[pos] < 0) return;
    auto it = spec_.merges.find(pair_key(ids[pos], ids[next[pos]]));
    if (it != spec_.merges.end()) heap.push({it->second.rank, pos, ids[pos], ids[next[pos]]});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);
  std::vector<char> alive(n, 1);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    // Stale when either symbol was merged away or changed since the pair was pushed.
    if (!alive[c.pos] || next[c.pos] < 0 || ids[c.pos] != c.left || ids[next[c.pos]] != c.right)
      continue;
    const int right = next[c.pos];
    ids[c.pos] = spec_.merges.at(pair_key(c.left, c.right)).id;
    alive[right] = 0;
    next[c.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.pos;
    consider(prev[c.pos]);
    consider(c.pos);
  }
  for (int i = 0; i >= 0; i = next[i]) out.push_back(ids[i]);
}

void RankedBpe::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1 && spec_.byte_ids[static_cast<unsigned char>(piece[0])] >= 0) {
    out.push_back(spec_.byte_ids[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (spec_.ignore_merges) {
    auto it = whole_tokens_.find(piece);
    if (it != whole_tokens_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (piece.size() > kMaxCachedPieceBytes) {
    merge_piece(piece, out);
    return;
  }
  PieceCache& cache = piece_cache;
  if (cache.owner != instance_) {
    cache.entries.clear();
    cache.owner = instance_;
  }
  auto it = cache.entries.find(piece);
  if (it != cache.entries.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  const size_t begin = out.size();
  merge_piece(piece, out);
  if (cache.entries.size() >= kMaxCacheEntries) cache.entries.clear();
  cache.entries.emplace(std::string(piece), std::vector<int32_t>(out.begin() + begin, out.end()));
}

void RankedBpe::encode_segment(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::string prefixed;
  if (spec_.add_prefix_space && text[0] != ' ') {
    prefixed.reserve(text.size() + 1);
    prefixed.push_back(' ');
    prefixed.append(text);
    text = prefixed;
  }
  split_pieces(spec_.pattern, text, [&](std::string_view piece) { encode_piece(piece, out); });
}

void RankedBpe::encode_append(std::string_view text, std::vector<int32_t>& out) const {
  // Non-special added tokens are cut out of the text first (longest at the leftmost position).
  while (!spec_.text_added.empty()) {
    size_t best = std::string_view::npos, best_length = 0;
    int32_t best_id = -1;
    for (const auto& [content, id] : spec_.text_added) {
      const size_t at = text.find(content);
      if (at == std::string_view::npos || content.empty()) continue;
      if (at < best || (at == best && content.size() > best_length)) {
        best = at;
        best_length = content.size();
        best_id = id;
      }
    }
    if (best == std::string_view::npos) break;
    encode_segment(text.substr(0, best), out);
    out.push_back(best_id);
    text.remove_prefix(best + best_length);
  }
  encode_segment(text, out);
}

std::string RankedBpe::decode(std::span<const int32_t> ids) const {
  std::string text;
  std::string fallback;  // a run of <0xXX> tokens' bytes: UTF-8 of byte-level characters
  auto end_fallback_run = [&] {
    const std::optional<std::string> bytes = byte_level_decode(fallback);
    text += bytes ? *bytes : fallback;
    fallback.clear();
  };
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size() || spec_.kinds[id] == TokenKind::kHole) {
      throw Error("token id " + std::to_string(id) + " is not in the tokenizer's vocabulary (" +
                  std::to_string(vocab_size()) +
                  " ids); was the data made with another tokenizer?");
    }
    if (const auto it = spec_.fallback_byte.find(id); it != spec_.fallback_byte.end()) {
      fallback += static_cast<char>(it->second);
      continue;
    }
    if (!fallback.empty()) end_fallback_run();
    text += spec_.token_bytes[id];
  }
  if (!fallback.empty()) end_fallback_run();
  return text;
}

std::vector<std::pair<int32_t, int32_t>> RankedBpe::merge_list() const {
  std::vector<std::tuple<int32_t, int32_t, int32_t>> rules;  // rank, left, right
  rules.reserve(spec_.merges.size());
  for (const auto& [key, rule] : spec_.merges) {
    rules.emplace_back(rule.rank, static_cast<int32_t>(key >> 32),
                       static_cast<int32_t>(key & 0xFFFFFFFFu));
  }
  std::sort(rules.begin(), rules.end());
  std::vector<std::pair<int32_t, int32_t>> list;
  list.reserve(rules.size());
  for (const auto& [rank, left, right] : rules) list.emplace_back(left, right);
  return list;
}

}  // namespace trillion::data
