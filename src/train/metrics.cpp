// See metrics.h.
#include "train/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

namespace trillion {

nlohmann::json memory_json(const MemoryTracker& t) {
  nlohmann::json j;
  for (int c = 0; c < kMemoryCategories; ++c) {
    const auto cat = static_cast<MemoryCategory>(c);
    j[std::string(memory_category_name(cat))] = t.peak(cat);
  }
  return j;
}

nlohmann::json comm_json(const std::string& group, const comm::CommCounters& c) {
  nlohmann::json kinds = nlohmann::json::object();
  for (int k = 0; k < comm::kCollectiveKinds; ++k) {
    const auto kind = static_cast<comm::Collective>(k);
    if (c.sent(kind) > 0) kinds[std::string(comm::collective_name(kind))] = c.sent(kind);
  }
  return {{group, kinds}};
}

nlohmann::json memory_per_rank(comm::Communicator& world, const MemoryTracker& t,
                               double predicted_activations, double predicted_ring_buffers) {
  constexpr int K = kMemoryCategories, W = 2 * K + 2;
  std::vector<double> mine(W), all(W * world.size());
  for (int c = 0; c < K; ++c) {
    mine[c] = static_cast<double>(t.current(static_cast<MemoryCategory>(c)));
    mine[K + c] = static_cast<double>(t.peak(static_cast<MemoryCategory>(c)));
  }
  mine[2 * K] = predicted_activations;
  mine[2 * K + 1] = predicted_ring_buffers;
  world.all_gather(Tensor(mine.data(), DType::f64, {W}),
                   Tensor(all.data(), DType::f64, {W * world.size()}));
  nlohmann::json ranks = nlohmann::json::array();
  for (int r = 0; r < world.size(); ++r) {
    nlohmann::json current, peak;
    for (int c = 0; c < K; ++c) {
      const std::string name(memory_category_name(static_cast<MemoryCategory>(c)));
      current[name] = static_cast<uint64_t>(all[W * r + c]);
      peak[name] = static_cast<uint64_t>(all[W * r + K + c]);
    }
    nlohmann::json rank{{"rank", r}, {"current", current}, {"peak", peak}};
    if (all[W * r + 2 * K] >= 0) {
      rank["predicted"]["activations"] = static_cast<uint64_t>(all[W * r + 2 * K]);
    }
    if (all[W * r + 2 * K + 1] >= 0) {
      rank["predicted"]["workspace_context_ring"] = static_cast<uint64_t>(all[W * r + 2 * K + 1]);
    }
    ranks.push_back(rank);
  }
  return ranks;
}

nlohmann::json ring_balance_json(comm::Communicator& world, comm::Communicator& cp,
                                 double forward_flops) {
  std::vector<double> all(static_cast<size_t>(world.size()));
  double mine = forward_flops;
  world.all_gather(Tensor(&mine, DType::f64, {1}), Tensor(all.data(), DType::f64, {world.size()}));
  double group[2] = {forward_flops, forward_flops};  // max, sum over this rank's cp group
  cp.all_reduce(Tensor(&group[0], DType::f64, {1}), comm::ReduceOp::max);
  cp.all_reduce(Tensor(&group[1], DType::f64, {1}));
  double ratio = group[1] > 0 ? group[0] / (group[1] / cp.size()) : 1.0;
  world.all_reduce(Tensor(&ratio, DType::f64, {1}), comm::ReduceOp::max);
  return {{"attention_forward_flops_per_rank", all}, {"attention_balance_max_over_mean", ratio}};
}

std::string format_duration(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds);
  if (s >= 3600) return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

std::string format_percent(double fraction) {
  const double p = 100 * fraction;
  if (!std::isfinite(p) || p == 0 || std::abs(p) >= 10) return fmt::format("{:.1f}%", p);
  return fmt::format("{:.{}f}%", p,
                     std::max(1, 2 - static_cast<int>(std::floor(std::log10(std::abs(p))))));
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string MfuConvention::describe() const {
  return fmt::format("model FLOPs {} per token ({} attention)",
                     attention == plan::AttentionFlops::kCausal ? "6N + 6·L·h·s" : "6N + 12·L·h·s",
                     plan::attention_flops_name(attention));
}

MfuConvention mfu_convention(const plan::ModelSpec& model, int64_t seq_len,
                             plan::AttentionFlops attention) {
  return {plan::model_flops_per_token(model, seq_len, attention), attention};
}

}  // namespace trillion
