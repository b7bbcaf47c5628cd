// See step_runner.h: the MoE and MTP bookkeeping that closes a step (step_runner.cpp runs it):
// every layer's expert loads summed over the ranks that routed its tokens, the routing biases
// moved by the balancing rule (DeepSeek-V3 §2.1.2; MoE MTP blocks count as layers L + k), and
// the MTP depths' losses as global means. Every rank ends with the same numbers.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "train/step_runner.h"

namespace trillion {

void StepRunner::finish_moe_step(StepStats& st) {
  const MoeConfig& moe = config_.model.moe;
  const ModelConfig& model = config_.model;
  // MoE MTP blocks (model/mtp.h) count as layers L + k: their loads, bias and load ratio.
  const int64_t E = moe.n_routed_experts;
  const int64_t L = model.n_layers + (model.moe_layer(model.n_layers - 1) ? model.mtp.depth : 0);
  // [L * E] loads of every layer (zero where this rank holds none), then balance and dropped.
  std::vector<double> v(L * E + 2, 0.0);
  for (auto& stage : stages_) {
    const MoeStepStats s = stage->take_moe_stats();
    for (size_t i = 0; i < s.layers.size(); ++i) {
      for (int64_t e = 0; e < E; ++e) v[s.layers[i] * E + e] += s.loads[i][e];
    }
    v[L * E] += s.balance_loss;
    v[L * E + 1] += static_cast<double>(s.dropped);
  }
  const Tensor all(v.data(), DType::f64, {static_cast<int64_t>(v.size())});
  // Every token is routed on exactly one rank of dp x cp (a cp rank routes its part of each
  // sequence, and its balance loss is its share), so the sums over reduce_ are the step's.
  if (reduce_.size() > 1) reduce_.all_reduce(all);
  // With the experts over tp x ep each tp rank routed its own N/tp rows: add them too.
  if (ctx_.moe_slice) tp_.all_reduce(all);
  // DualPipe: each copy of a layer saw half the micro-batches; both update from the sum.
  if (mirror_) mirror_->all_reduce(all);
  const bool contributes = !mirror_ || pp_.rank() < pp_.size() - 1 - pp_.rank();
  // Each rank moves the biases it holds, from the same global loads: replicas stay equal.
  double bias_sq = 0;
  st.moe_layer_load_ratio.assign(L, 0.0);
  for (int64_t l = 0; l < L; ++l) {
    double sum = 0, mx = 0;
    for (int64_t e = 0; e < E; ++e) sum += v[l * E + e], mx = std::max(mx, v[l * E + e]);
    if (sum > 0) st.moe_layer_load_ratio[l] = mx / (sum / static_cast<double>(E));
    const std::string bias = l < model.n_layers
                                 ? fmt::format("layers.{}.moe.router_bias", l)
                                 : fmt::format("mtp.{}.moe.router_bias", l - model.n_layers);
    if (sum > 0 && params_->table().contains(bias)) {
      const Tensor b = params_->param(bias);
      if (!st.update_skipped) {  // a skipped step leaves the routing biases too
        Router::update_bias(b, std::vector<double>(v.begin() + l * E, v.begin() + (l + 1) * E),
                            moe.bias_update_rate);
      }
      if (contributes) bias_sq += be_.sum_squares(b);  // once over DualPipe's two copies
    }
  }
  st.moe_balance_loss = v[L * E];
  st.moe_dropped_tokens = static_cast<int64_t>(v[L * E + 1]);
  if (pp_.size() > 1) {
    // Each layer lives on one stage (counted once under DualPipe by the lower rank of a pair).
    std::vector<double> r = st.moe_layer_load_ratio;
    r.push_back(st.moe_balance_loss);
    r.push_back(static_cast<double>(st.moe_dropped_tokens));
    if (!contributes) std::fill(r.begin(), r.end(), 0.0);
    r.push_back(bias_sq);
    pp_.all_reduce(Tensor(r.data(), DType::f64, {static_cast<int64_t>(r.size())}));
    std::copy(r.begin(), r.begin() + L, st.moe_layer_load_ratio.begin());
    st.moe_balance_loss = r[L];
    st.moe_dropped_tokens = static_cast<int64_t>(r[L + 1]);
    bias_sq = r[L + 2];
  }
  st.moe_balance_loss /= static_cast<double>(config_.train.micro_batch * config_.train.grad_accum);
  st.moe_bias_norm = std::sqrt(bias_sq);
  st.moe_max_load_ratio =
      *std::max_element(st.moe_layer_load_ratio.begin(), st.moe_layer_load_ratio.end());
}

// Each micro-batch's head ran on one rank of the pp group (DualPipe: one of the two ends) and
// each token on one rank of dp x cp: the sums over both are the step's.
void StepRunner::finish_mtp_step(StepStats& st, int64_t step_index) {
  std::vector<double> v(config_.model.mtp.depth, 0.0);
  for (auto& stage : stages_) {
    const std::vector<double> sums = stage->take_mtp_losses();
    for (size_t k = 0; k < sums.size(); ++k) v[k] += sums[k];
  }
  const Tensor all(v.data(), DType::f64, {static_cast<int64_t>(v.size())});
  if (pp_.size() > 1) pp_.all_reduce(all);
  if (reduce_.size() > 1) reduce_.all_reduce(all);
  for (double& x : v) x /= static_cast<double>(tokens_per_step());
  st.mtp_losses = v;
  st.mtp_loss_weight = config_.model.mtp.weight_at(step_index);
}

}  // namespace trillion
