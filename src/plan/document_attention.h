// Attention FLOPs of packed sequences under a document mask (data.document_mask): documents with
// lengths drawn independently from a distribution are packed end to end into one token stream,
// and training windows of T tokens start anywhere in it. A token at window position t whose
// document began u tokens earlier sees min(u, t) + 1 keys (its document's, inside the window)
// instead of the causal t + 1. The token's document is length-biased (a long document holds more
// tokens: P(L = l) = l p(l) / E[L]) and u is uniform in [0, l), which gives the expectation below
// exactly for a stationary stream (renewal theory); it is what the engine's kernels count as
// visible pairs, up to the sampling of a finite run. Formulas cite docs/data.md's worked example.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/model_spec.h"

namespace trillion::plan {

// A distribution of document lengths (tokens, end token included): length[i] with weight[i]
// (weights need not sum to 1). Throws Error for an empty list, a length < 1 or a weight <= 0.
struct DocumentLengths {
  std::vector<int64_t> length;
  std::vector<double> weight;
};

// Expected visible (query, key) pairs of one window of T tokens, per head.
double document_visible_pairs(const DocumentLengths& documents, int64_t seq_len);
// The same over the causal pairs T (T + 1) / 2: the fraction of causal attention work that is
// left (1 when every document is much longer than T).
double document_attention_fraction(const DocumentLengths& documents, int64_t seq_len);
// Context parallelism under the mask: the expected visible pairs of each of `cp` ranks holding a
// window split zigzag (rank r: chunks r and 2cp-1-r of 2cp) or contiguous (chunk r of cp), as
// the worst rank's over the mean (1 = balanced). Zigzag balances causal attention exactly; with
// documents shorter than the window every position sees about the same number of keys, so any
// split balances; between the two, this says how far zigzag stays from 1. seq_len must divide
// into the chunks. An expectation over the stream: one batch's few documents spread around it
// (the engine reports a run's measured max/mean in summary.json's "context").
double document_cp_balance(const DocumentLengths& documents, int64_t seq_len, int64_t cp,
                           bool zigzag);
// Attention-score training FLOPs per token and layer (the convention of
// attention_flops_per_token_layer with kCausal, scaled by document_attention_fraction).
double document_attention_flops_per_token_layer(const ModelSpec& m, int64_t seq_len,
                                                const DocumentLengths& documents);

}  // namespace trillion::plan
