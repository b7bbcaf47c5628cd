// See document_attention.h. For a token at window position t in a document of length l, with u
// uniform in [0, l): sum_{u<l} min(u, t) = l (l - 1) / 2 when l - 1 <= t, else
// t (t + 1) / 2 + t (l - 1 - t). Weighting by the length-biased P(l) = l p(l) / E[L] and dividing
// by l (u uniform) leaves p(l) / E[L] times that sum.
#include "plan/document_attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

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

// Expected visible keys of the token at each window position t: 1 + E[min(u, t)].
std::vector<double> position_work(const DocumentLengths& d, int64_t seq_len) {
  check(d, seq_len);
  double total_weight = 0, mean_length = 0;
  for (size_t i = 0; i < d.length.size(); ++i) {
    total_weight += d.weight[i];
    mean_length += d.weight[i] * static_cast<double>(d.length[i]);
  }
  mean_length /= total_weight;
  std::vector<double> work(static_cast<size_t>(seq_len));
  for (int64_t t = 0; t < seq_len; ++t) {
    double extra = 0;  // E[min(u, t)]
    for (size_t i = 0; i < d.length.size(); ++i) {
      extra += d.weight[i] / total_weight * sum_min(d.length[i], t);
    }
    work[static_cast<size_t>(t)] = 1 + extra / mean_length;
  }
  return work;
}

}  // namespace

double document_visible_pairs(const DocumentLengths& d, int64_t seq_len) {
  double pairs = 0;
  for (double w : position_work(d, seq_len)) pairs += w;
  return pairs;
}

double document_cp_balance(const DocumentLengths& d, int64_t seq_len, int64_t cp, bool zigzag) {
  const int64_t chunks = zigzag ? 2 * cp : cp;
  if (cp < 1 || seq_len % chunks != 0) {
    throw Error(fmt::format("sequence length {} does not split into {} {} chunks for cp {}",
                            seq_len, chunks, zigzag ? "zigzag" : "contiguous", cp));
  }
  const std::vector<double> work = position_work(d, seq_len);
  const int64_t size = seq_len / chunks;
  auto chunk = [&](int64_t c) {
    double sum = 0;
    for (int64_t t = c * size; t < (c + 1) * size; ++t) sum += work[static_cast<size_t>(t)];
    return sum;
  };
  double worst = 0, total = 0;
  for (int64_t r = 0; r < cp; ++r) {
    const double rank = zigzag ? chunk(r) + chunk(chunks - 1 - r) : chunk(r);
    worst = std::max(worst, rank);
    total += rank;
  }
  return worst / (total / static_cast<double>(cp));
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
