// SequenceSplit: which positions of each sequence a context-parallel rank holds. The sequence of
// T tokens is cut into chunks; a rank's T/cp local rows are its chunks in order:
//   contiguous: rank r holds positions [r T/cp, (r+1) T/cp) — causal work grows with r;
//   zigzag:     2 cp chunks of T/(2cp); rank r holds chunks r and 2cp-1-r, so every rank does the
//               same causal attention work (the load-balanced split of Megatron-Core CP and
//               torchtitan; REFERENCE.md "Context parallelism").
// With cp = 1 both are the whole sequence at positions 0..T-1. RoPE angles, the data rows a rank
// reads and the attention mask all come from these positions, so any split computes the
// one-process run. Invariant: spans() throws Error (naming parallel.cp and the length) when T
// does not cut evenly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace trillion {

enum class CpSplit { zigzag, contiguous };

// "zigzag" | "contiguous"; anything else is an Error naming `field` and the choices.
CpSplit parse_cp_split(const std::string& name, const std::string& field);
const char* cp_split_name(CpSplit s);

struct SequenceSplit {
  int cp = 1;
  CpSplit kind = CpSplit::zigzag;

  // How many equal chunks a sequence is cut into (2 cp for zigzag, cp for contiguous).
  int chunks() const { return cp == 1 ? 1 : (kind == CpSplit::zigzag ? 2 * cp : cp); }
  // The spans of rank `rank`'s local rows (row offsets within its T/cp rows), in row order.
  std::vector<AttentionSpan> spans(int64_t seq_len, int rank) const;
  // The global position of each of rank `rank`'s T/cp local rows.
  std::vector<int64_t> positions(int64_t seq_len, int rank) const;
};

}  // namespace trillion
