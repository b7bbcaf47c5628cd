// See document_attention.h. For a token at window position t in a document of length l, with u
// uniform in [0, l): sum_{u<l} min(u, t) = l (l - 1) / 2 when l - 1 <= t, else
// t (t + 1) / 2 + t (l - 1 - t). Weighting by the length-biased P(l) = l p(l) / E[L] and dividing
// by l (u uniform) leaves p(l) / E[L] times that sum.
#include "plan/document_attention.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"

namespace trillion::plan {

namespace {
void check(const DocumentLengths& d, int64_t seq_len) {
  if (d.length.empty() || d.length.size() != d.weight.size()) {
    throw Error("a document-length distribution needs one weight per length, and at least one");
  }
  for (size_t i = 0; i < d.length.size(); ++i) {
    if (d.length[i] < 1 || !(d.weight[i] > 0) || !std::isfinite(d.weight[i])) {
      throw Error(
          fmt::format("document length {} with weight {}: lengths must be >= 1 token and "
                      "weights finite and > 0",
                      d.length[i], d.weight[i]));
    }
  }
  if (seq_len < 1 || seq_len > kMaxSeqLen) {
    throw Error(fmt::format("sequence length {} must be in [1, 2^24]", seq_len));
  }
}

// sum_{u=0}^{l-1} min(u, t)
double sum_min(int64_t l, int64_t t) {
  const double L = static_cast<double>(l), T = static_cast<double>(t);
  if (l - 1 <= t) return L * (L - 1) / 2;
  return T * (T + 1) / 2 + T * (L - 1 - T);
}
}  // namespace

double document_visible_pairs(const DocumentLengths& d, int64_t seq_len) {
  check(d, seq_len);
  double total_weight = 0, mean_length = 0;
  for (size_t i = 0; i < d.length.size(); ++i) {
    total_weight += d.weight[i];
    mean_length += d.weight[i] * static_cast<double>(d.length[i]);
  }
  mean_length /= total_weight;
  double pairs = 0;
  for (int64_t t = 0; t < seq_len; ++t) {
    double extra = 0;  // E[min(u, t)]
    for (size_t i = 0; i < d.length.size(); ++i) {
      extra += d.weight[i] / total_weight * sum_min(d.length[i], t);
    }
    pairs += 1 + extra / mean_length;
  }
  return pairs;
}

double document_attention_fraction(const DocumentLengths& d, int64_t seq_len) {
  const double T = static_cast<double>(seq_len);
  return document_visible_pairs(d, seq_len) / (T * (T + 1) / 2);
}

double document_attention_flops_per_token_layer(const ModelSpec& m, int64_t seq_len,
                                                const DocumentLengths& d) {
  return attention_flops_per_token_layer(m, seq_len, AttentionFlops::kCausal) *
         document_attention_fraction(d, seq_len);
}

}  // namespace trillion::plan
