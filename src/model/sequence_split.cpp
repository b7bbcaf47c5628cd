// See sequence_split.h.
#include "model/sequence_split.h"

#include <fmt/format.h>

#include "core/error.h"

namespace trillion {

CpSplit parse_cp_split(const std::string& name, const std::string& field) {
  if (name == "zigzag") return CpSplit::zigzag;
  if (name == "contiguous") return CpSplit::contiguous;
  throw Error(fmt::format("{} = \"{}\": expected \"zigzag\" (load-balanced) or \"contiguous\"",
                          field, name));
}

const char* cp_split_name(CpSplit s) {
  return s == CpSplit::zigzag ? "zigzag" : "contiguous";
}

std::vector<AttentionSpan> SequenceSplit::spans(int64_t T, int rank) const {
  const int n = chunks();
  if (cp < 1 || rank < 0 || rank >= cp || T % n != 0) {
    throw Error(fmt::format(
        "parallel.cp = {} with parallel.cp_split = \"{}\" cuts a sequence into {} equal chunks, "
        "but the sequence length {} is not a multiple of {}; choose a model.seq_len divisible "
        "by {}",
        cp, cp_split_name(kind), n, T, n, n));
  }
  const int64_t chunk = T / n;
  if (n == 1) return {{0, T, 0}};
  if (kind == CpSplit::contiguous) return {{0, chunk, rank * chunk}};
  return {{0, chunk, rank * chunk}, {chunk, chunk, (2 * cp - 1 - rank) * chunk}};
}

std::vector<int64_t> SequenceSplit::positions(int64_t T, int rank) const {
  std::vector<int64_t> p;
  for (const AttentionSpan& s : spans(T, rank)) {
    for (int64_t i = 0; i < s.len; ++i) p.push_back(s.position + i);
  }
  return p;
}

}  // namespace trillion
