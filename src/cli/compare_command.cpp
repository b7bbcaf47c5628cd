// `trillion compare RUN_A RUN_B [--tol X] [--metric KEY]`: the acceptance test of "same math, any
// layout". Prints per-step loss differences (or of another metrics.jsonl key, on the steps that
// log it: `--metric val_loss` compares a DiLoCo run, whose `loss` is one island's, by its global
// model) and the largest absolute difference of the final weights (newest checkpoint of each
// run); exits 0 iff every difference is <= X (X = 0: bitwise), 1 if not, 2 on a user error
// (missing run, different models: checked on the checkpoints' model configs, not only sizes).
// A non-finite value (metrics.jsonl records NaN and infinities as null) is never within any
// tolerance: it is printed as "nan" and named, and the runs DIFFER.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/parse_arguments.h"
#include "core/error.h"
#include "core/json_fields.h"
#include "train/checkpoint/checkpoint.h"
#include "train/run_config.h"

namespace trillion::cli {

namespace {

std::map<int64_t, double> read_losses(const std::string& run_dir, const std::string& key) {
  std::error_code ec;
  if (!std::filesystem::is_directory(run_dir, ec)) {
    throw Error(fmt::format("'{}' is not a directory; pass two run directories", run_dir));
  }
  const std::string path = run_dir + "/metrics.jsonl";
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("'{}' has no metrics.jsonl: is it a run directory?", run_dir));
  std::map<int64_t, double> losses;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    const std::string origin = fmt::format("{}:{}", path, number);
    const nlohmann::json j = parse_json(line, origin);
    if (json_has(j, key)) losses[json_int(j, "step", origin)] = json_number(j, key, origin, true);
  }
  return losses;
}

struct FinalWeights {
  CheckpointWeights weights;
  std::string dir;
  PinnedCheckpoint pinned;  // a live run's retention leaves it while compare reads it
};

// What every weight means: runs that differ in any of these hold different models even when
// they hold as many weights (4 heads of 8 or 2 of 16, one KV head or two).
std::vector<std::pair<std::string, std::string>> architecture(const std::string& checkpoint) {
  const ModelConfig m =
      parse_run_config(read_checkpoint_config(checkpoint), checkpoint + "/config.toml", {}).model;
  std::vector<std::pair<std::string, std::string>> a = {
      {"vocab_size", std::to_string(m.vocab_size)}, {"d_model", std::to_string(m.d_model)},
      {"n_layers", std::to_string(m.n_layers)},     {"n_heads", std::to_string(m.n_heads)},
      {"n_kv_heads", std::to_string(m.n_kv_heads)}, {"head_dim", std::to_string(m.head_dim)},
      {"ffn_hidden", std::to_string(m.ffn_hidden)},
      {"tied_embeddings", m.tied_embeddings ? "true" : "false"}};
  if (m.moe.enabled()) {
    a.insert(a.end(), {{"n_dense_layers", std::to_string(m.moe.n_dense_layers)},
                       {"n_routed_experts", std::to_string(m.moe.n_routed_experts)},
                       {"n_shared_experts", std::to_string(m.moe.n_shared_experts)},
                       {"expert_ffn", std::to_string(m.moe.expert_ffn)}});
  }
  return a;
}

FinalWeights read_params(const std::string& run_dir) {
  std::optional<PinnedCheckpoint> pin =
      pin_newest_checkpoint(run_dir, -1, [](const std::string& dir, const std::string& why) {
        std::fprintf(stderr, "skipping corrupt checkpoint %s: %s\n", dir.c_str(), why.c_str());
      });
  if (!pin) {
    throw Error(fmt::format("'{}' has no valid checkpoint to compare weights from", run_dir));
  }
  const std::string dir = pin->dir();
  return {read_checkpoint_weights(dir), dir, std::move(*pin)};
}

}  // namespace

int compare_command(int argc, char** argv) {
  CLI::App app{"Compare two runs: per-step losses and final weights"};
  std::string a, b;
  double tol = 0;
  std::string metric = "loss";
  app.add_option("run_a", a, "first run directory")->required();
  app.add_option("run_b", b, "second run directory")->required();
  app.add_option("--tol", tol, "largest allowed absolute difference (0: bitwise)")
      ->check(finite_at_least(0));
  app.add_option("--metric", metric, "the metrics.jsonl key compared per step (default loss)");
  if (const int rc = parse_arguments(app, argc, argv); rc >= 0) return rc;
  const auto la = read_losses(a, metric), lb = read_losses(b, metric);
  if (la.empty()) throw Error(fmt::format("'{}' logs no '{}' in metrics.jsonl", a, metric));
  bool ok = la.size() == lb.size();
  double max_loss_diff = 0;
  std::vector<std::string> non_finite;  // "run A step 3", ...
  std::printf("%8s %14s %14s %12s\n", "step", (metric + " A").c_str(), (metric + " B").c_str(),
              "|diff|");
  for (const auto& [step, loss_a] : la) {
    auto it = lb.find(step);
    if (it == lb.end()) {
      std::printf("%8lld %14.8f %14s\n", static_cast<long long>(step), loss_a, "missing");
      ok = false;
      continue;
    }
    const double diff = std::abs(loss_a - it->second);
    if (!std::isfinite(loss_a)) non_finite.push_back(fmt::format("run A step {}", step));
    if (!std::isfinite(it->second)) non_finite.push_back(fmt::format("run B step {}", step));
    max_loss_diff = std::isnan(diff) ? INFINITY : std::max(max_loss_diff, diff);
    if (!(diff <= tol)) ok = false;
    std::printf("%8lld %14.8f %14.8f %12.3e\n", static_cast<long long>(step), loss_a, it->second,
                diff);
  }
  if (la.size() != lb.size()) {
    std::printf("runs have %zu and %zu logged steps\n", la.size(), lb.size());
  }
  for (const auto& [step, loss_b] : lb) {
    if (!la.count(step) && !std::isfinite(loss_b)) {
      non_finite.push_back(fmt::format("run B step {}", step));
    }
  }
  if (!non_finite.empty()) {
    ok = false;
    std::printf(
        "non-finite loss (NaN or infinity) at %zu step(s), first %s: such steps never "
        "match\n",
        non_finite.size(), non_finite.front().c_str());
  }
  const FinalWeights final_a = read_params(a), final_b = read_params(b);
  // Same sizes are not the same model: element-wise differences mean something only between
  // weights of one architecture.
  const auto arch_a = architecture(final_a.dir), arch_b = architecture(final_b.dir);
  for (size_t i = 0; i < arch_a.size() && i < arch_b.size(); ++i) {
    if (arch_a[i] != arch_b[i]) {
      throw Error(fmt::format(
          "'{}' and '{}' hold different models (model.{} {} vs {}); compare runs of one model "
          "config",
          final_a.dir, final_b.dir, arch_a[i].first, arch_a[i].second, arch_b[i].second));
    }
  }
  if (arch_a.size() != arch_b.size()) {
    throw Error(fmt::format("'{}' and '{}' hold different models (one is a mixture of experts)",
                            final_a.dir, final_b.dir));
  }
  const CheckpointWeights& wa = final_a.weights;
  const CheckpointWeights& wb = final_b.weights;
  const std::string& pa = wa.bytes;
  const std::string& pb = wb.bytes;
  if (pa.size() != pb.size() || wa.dtype_bytes != wb.dtype_bytes) {
    throw Error(fmt::format("final weights differ in size ({} vs {} bytes): different models",
                            pa.size(), pb.size()));
  }
  double max_weight_diff = 0;
  const bool bitwise_equal = pa == pb;
  auto max_diff = [&](auto tag) {
    using T = decltype(tag);
    const auto* fa = reinterpret_cast<const T*>(pa.data());
    const auto* fb = reinterpret_cast<const T*>(pb.data());
    for (size_t i = 0; i < pa.size() / sizeof(T); ++i) {
      const double d = std::abs(static_cast<double>(fa[i]) - static_cast<double>(fb[i]));
      max_weight_diff = std::isnan(d) ? INFINITY : std::max(max_weight_diff, d);
    }
  };
  if (!bitwise_equal) {
    if (wa.dtype_bytes == 8) {
      max_diff(double{});
    } else {
      max_diff(float{});
    }
  }
  if (!(max_weight_diff <= tol) || (tol == 0 && !bitwise_equal)) ok = false;
  std::printf("max |%s diff| %.3e, max |weight diff| %.3e%s, tolerance %.3e: %s\n", metric.c_str(),
              max_loss_diff, max_weight_diff, bitwise_equal ? " (bitwise equal)" : "", tol,
              ok ? "MATCH" : "DIFFER");
  return ok ? 0 : 1;
}

}  // namespace trillion::cli
