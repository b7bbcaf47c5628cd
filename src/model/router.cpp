// See router.h.
#include "model/router.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "model/carver.h"

namespace trillion {

namespace {

template <typename F>
void with_type(DType dt, F&& f) {
  if (dt == DType::f64) {
    f(double{});
  } else {
    TRILLION_CHECK(dt == DType::f32, "the router computes in f32 or f64");
    f(float{});
  }
}

}  // namespace

Router::Router(Backend& backend, const ParallelContext& ctx, const MoeConfig& config)
    : be_(backend), ctx_(ctx), config_(config) {}

void Router::carve(Carver& kept, Routing& r) const {
  const int64_t N = ctx_.moe_tokens();
  r.scores = kept.take({N, config_.n_routed_experts});
  r.gates = kept.take({N, config_.top_k});
}

Tensor Router::carve_stash(Carver& c) const {
  return c.take({ctx_.moe_tokens(), config_.n_routed_experts});
}

void Router::forward(const Tensor& x, const RouterWeights& w, Routing& r) {
  // T: this rank's rows of each sequence; T_seq: the whole sequence's tokens (T * cp). N: the
  // rows routed here, from row `first` of the micro-batch's B * T (a tp slice under moe_slice).
  const int64_t N = ctx_.moe_tokens(), first = ctx_.moe_first_token(), T = ctx_.shape.seq;
  const int64_t B = ctx_.shape.tokens() / T;
  const int64_t T_seq = T * ctx_.sequence.cp;
  const int64_t E = config_.n_routed_experts, K = config_.top_k;
  const bool sigmoid = config_.router == "sigmoid_bias";
  be_.gemm(r.scores, false, true, x, w.router, 1.0, 0.0);
  r.expert.assign(N * K, 0);
  r.dropped.assign(N * K, 0);
  r.f.assign(B * E, 0.0);
  r.dropped_count = 0;
  r.balance_loss = 0;
  // Group-limited routing: G groups of E / G experts by index (the layout plays no part).
  const int64_t G = config_.n_group, per_group = E / G;
  const bool limited = config_.topk_group < G;
  const int64_t capacity =
      config_.capacity_factor > 0
          ? static_cast<int64_t>(std::ceil(config_.capacity_factor * N * K / E))
          : N * K;
  std::vector<int64_t> taken(E, 0);
  with_type(r.scores.dtype(), [&](auto tag) {
    using T_ = decltype(tag);
    T_* s = r.scores.data<T_>();
    T_* g = r.gates.data<T_>();
    const T_* bias = w.bias.empty() ? nullptr : w.bias.data<T_>();
    std::vector<double> key(E);
    std::vector<int64_t> order(E);
    std::vector<char> allowed(E);
    std::vector<std::pair<double, int64_t>> group_score(G);  // (-score, group): best first
    for (int64_t t = 0; t < N; ++t) {
      T_* row = s + t * E;
      if (sigmoid) {
        for (int64_t i = 0; i < E; ++i)
          row[i] = static_cast<T_>(1.0 / (1.0 + std::exp(-double(row[i]))));
      } else {
        double mx = -INFINITY, sum = 0;
        for (int64_t i = 0; i < E; ++i) mx = std::max(mx, double(row[i]));
        for (int64_t i = 0; i < E; ++i) sum += std::exp(double(row[i]) - mx);
        for (int64_t i = 0; i < E; ++i)
          row[i] = static_cast<T_>(std::exp(double(row[i]) - mx) / sum);
      }
      for (int64_t i = 0; i < E; ++i) key[i] = double(row[i]) + (bias ? double(bias[i]) : 0.0);
      std::fill(allowed.begin(), allowed.end(), 1);
      if (limited) {
        // A group's score is the sum of its two largest keys; the topk_group best groups are
        // kept (ties: the lower group index) and the top K are chosen among their experts.
        for (int64_t gi = 0; gi < G; ++gi) {
          double first_key = -INFINITY, second_key = -INFINITY;
          for (int64_t i = gi * per_group; i < (gi + 1) * per_group; ++i) {
            if (key[i] > first_key) {
              second_key = first_key;
              first_key = key[i];
            } else if (key[i] > second_key) {
              second_key = key[i];
            }
          }
          group_score[gi] = {-(first_key + second_key), gi};
        }
        std::sort(group_score.begin(), group_score.end());
        std::fill(allowed.begin(), allowed.end(), 0);
        for (int64_t j = 0; j < config_.topk_group; ++j) {
          const int64_t gi = group_score[j].second;
          std::fill(allowed.begin() + gi * per_group, allowed.begin() + (gi + 1) * per_group, 1);
        }
      }
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int64_t a, int64_t b) {
        if (allowed[a] != allowed[b]) return allowed[a] > allowed[b];
        return key[a] != key[b] ? key[a] > key[b] : a < b;
      });
      double chosen_sum = 0;
      for (int64_t k = 0; k < K; ++k) chosen_sum += double(row[order[k]]);
      const int64_t b = (first + t) / T;
      for (int64_t k = 0; k < K; ++k) {
        const int64_t e = order[k];
        r.expert[t * K + k] = static_cast<int32_t>(e);
        r.f[b * E + e] += 1.0;  // a count until every rank's tokens of the sequence are in
        if (taken[e] >= capacity) {
          r.dropped[t * K + k] = 1;
          ++r.dropped_count;
          g[t * K + k] = 0;
        } else {
          ++taken[e];
          g[t * K + k] = static_cast<T_>(double(row[e]) / chosen_sum);
        }
      }
    }
    // f needs the whole sequence's choices: the counts (exact integers, so the sum is the
    // one-process count in any order) add over the cp ranks holding its parts.
    if (ctx_.cp != nullptr) ctx_.cp->all_reduce(Tensor(r.f.data(), DType::f64, {B * E}));
    // Under moe_slice the tp ranks hold the other rows of the micro-batch: add theirs.
    if (ctx_.moe_slice) ctx_.tp->all_reduce(Tensor(r.f.data(), DType::f64, {B * E}));
    const double f_scale = static_cast<double>(E) / static_cast<double>(K * T_seq);
    for (double& f : r.f) f *= f_scale;
    // Balance loss per sequence: alpha * sum_i f_i P_i. P is a sum over the sequence's tokens,
    // so this rank's share alpha * sum_i f_i P_i(its tokens) adds over cp to the sequence's loss
    // (finish_moe_step sums the shares over dp x cp).
    for (int64_t b = 0; b < B; ++b) {
      std::vector<double> P(E, 0.0);
      // This rank's rows of sequence b (all of them unless moe_slice cuts it).
      const int64_t lo = std::max(b * T, first) - first;
      const int64_t hi = std::min((b + 1) * T, first + N) - first;
      for (int64_t t = lo; t < hi; ++t) {
        const T_* row = s + t * E;
        double total = 1.0;
        if (sigmoid) total = std::accumulate(row, row + E, 0.0);
        for (int64_t i = 0; i < E; ++i) {
          P[i] += double(row[i]) / total / static_cast<double>(T_seq);
        }
      }
      for (int64_t i = 0; i < E; ++i) {
        r.balance_loss += config_.balance_loss_alpha * r.f[b * E + i] * P[i];
      }
    }
  });
}

void Router::backward_input(Tensor dx, const Tensor& dz, const std::vector<double>& dgates,
                            const RouterWeights& w, const Routing& r, double grad_scale) {
  const int64_t N = ctx_.moe_tokens(), first = ctx_.moe_first_token(), T = ctx_.shape.seq;
  const int64_t E = config_.n_routed_experts, K = config_.top_k;
  const bool sigmoid = config_.router == "sigmoid_bias";
  const double alpha = config_.balance_loss_alpha;
  with_type(r.scores.dtype(), [&](auto tag) {
    using T_ = decltype(tag);
    const T_* s = r.scores.data<T_>();
    T_* out = dz.data<T_>();
    std::vector<double> ds(E);
    for (int64_t t = 0; t < N; ++t) {
      const T_* row = s + t * E;
      std::fill(ds.begin(), ds.end(), 0.0);
      // Gates: g_k = s_k / S over the K chosen (dropped ones included in S, their dL/dg = 0).
      double S = 0, weighted = 0;
      for (int64_t k = 0; k < K; ++k) S += double(row[r.expert[t * K + k]]);
      for (int64_t k = 0; k < K; ++k) {
        weighted += double(row[r.expert[t * K + k]]) / S * dgates[t * K + k];
      }
      for (int64_t k = 0; k < K; ++k) {
        ds[r.expert[t * K + k]] += (dgates[t * K + k] - weighted) / S;
      }
      // Balance loss through P: dL/ds'_i = grad_scale * alpha * f_i of the token's sequence
      // (with cp: the whole sequence's f from forward, and the 1/T of P cancels the T of the
      // sequence's weight grad_scale * T for the whole length T, so no cp factor appears).
      const double* f = &r.f[((first + t) / T) * E];
      if (sigmoid) {
        const double total = std::accumulate(row, row + E, 0.0);
        double a_dot = 0;
        for (int64_t i = 0; i < E; ++i) a_dot += grad_scale * alpha * f[i] * double(row[i]) / total;
        for (int64_t i = 0; i < E; ++i) ds[i] += (grad_scale * alpha * f[i] - a_dot) / total;
      } else {
        for (int64_t i = 0; i < E; ++i) ds[i] += grad_scale * alpha * f[i];
      }
      T_* dzr = out + t * E;
      if (sigmoid) {
        for (int64_t i = 0; i < E; ++i) {
          dzr[i] = static_cast<T_>(ds[i] * double(row[i]) * (1.0 - double(row[i])));
        }
      } else {
        double dot = 0;
        for (int64_t i = 0; i < E; ++i) dot += double(row[i]) * ds[i];
        for (int64_t i = 0; i < E; ++i) dzr[i] = static_cast<T_>(double(row[i]) * (ds[i] - dot));
      }
    }
  });
  const auto [a, b] = gradient_rows();
  if (b > a) be_.gemm(dx.rows(a, b), false, false, dz.rows(a, b), w.router, 1.0, 1.0);
}

void Router::backward_weight(Tensor drouter, const Tensor& x, const Tensor& dz) {
  const auto [a, b] = gradient_rows();
  if (b > a) be_.gemm(drouter, true, false, dz.rows(a, b), x.rows(a, b), 1.0, 1.0);
}

std::pair<int64_t, int64_t> Router::gradient_rows() const {
  const int64_t N = ctx_.moe_tokens();
  if (!ctx_.experts_tp) return {0, N};
  // Every tp rank routes all N rows identically: each takes its N/tp rows' share of dx (summed
  // by the layer's reduce-scatter) and of dWr (summed over tp with the replicated gradients).
  const int64_t rows = N / ctx_.tp_size(), r = ctx_.tp_rank();
  return {r * rows, (r + 1) * rows};
}

void Router::count_loads(const Routing& r, std::vector<double>& loads) const {
  loads.resize(config_.n_routed_experts, 0.0);
  for (size_t a = 0; a < r.expert.size(); ++a) {
    if (!r.dropped[a]) loads[r.expert[a]] += 1.0;
  }
}

void Router::update_bias(const Tensor& bias, const std::vector<double>& loads, double rate) {
  const int64_t E = bias.numel();
  const double mean = std::accumulate(loads.begin(), loads.end(), 0.0) / static_cast<double>(E);
  with_type(bias.dtype(), [&](auto tag) {
    using T_ = decltype(tag);
    T_* b = bias.data<T_>();
    for (int64_t i = 0; i < E; ++i) {
      if (loads[i] > mean) b[i] = static_cast<T_>(double(b[i]) - rate);
      if (loads[i] < mean) b[i] = static_cast<T_>(double(b[i]) + rate);
    }
  });
}

}  // namespace trillion
