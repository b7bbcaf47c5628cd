// See scale_out.h.
#include "plan/scale_out.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "plan/collectives.h"

namespace trillion::plan {

namespace {

void validate(const ScaleOutInputs& in) {
  if (in.datacenters < 1) {
    throw Error(fmt::format("--datacenters {} must be >= 1", in.datacenters));
  }
  if (!(in.inter_dc_latency_s >= 0)) {
    throw Error(fmt::format("--inter-dc-latency-ms {} must be >= 0", in.inter_dc_latency_s * 1e3));
  }
  if (!(in.inter_dc_bytes_per_second > 0)) {
    throw Error(fmt::format("--inter-dc-gbps {} must be > 0", in.inter_dc_bytes_per_second * 8e-9));
  }
  if (in.diloco_inner_steps < 0) {
    throw Error(fmt::format("--diloco-inner-steps {} must be >= 0 (0: no DiLoCo estimate)",
                            in.diloco_inner_steps));
  }
  if (in.diloco_fragments < 1 ||
      (in.diloco_inner_steps > 0 && in.diloco_inner_steps % in.diloco_fragments != 0)) {
    throw Error(fmt::format(
        "--diloco-fragments {} must be >= 1 and divide --diloco-inner-steps {} (fragments "
        "synchronise H/F steps apart)",
        in.diloco_fragments, in.diloco_inner_steps));
  }
  if (in.diloco_overlap_steps < 0 ||
      (in.diloco_inner_steps > 0 &&
       in.diloco_overlap_steps > in.diloco_inner_steps / in.diloco_fragments)) {
    throw Error(fmt::format(
        "--diloco-overlap-steps {} must be between 0 and H/F = {} (a fragment's exchange must "
        "land before that fragment's next one starts)",
        in.diloco_overlap_steps,
        in.diloco_inner_steps > 0 ? in.diloco_inner_steps / in.diloco_fragments : 0));
  }
}

// The exchange of `bytes` across D data centres: a ring over the sites' aggregate links.
double exchange_seconds(const ScaleOutInputs& in, double bytes) {
  Topology t;
  t.ranks_per_node = 1;
  t.nodes = in.datacenters;
  t.inter = {in.inter_dc_latency_s, in.inter_dc_bytes_per_second};
  return all_reduce_cost(AllReduceKind::kRing, bytes, t).seconds;
}

double crossing_bytes(const ScaleOutInputs& in, double bytes) {
  const double d = in.datacenters;
  return 2 * (d - 1) / d * bytes;
}

}  // namespace

ScaleOutEstimate estimate_scale_out(const ScaleOutInputs& in, double parameters,
                                    double step_seconds, int dp, double batch_tokens) {
  validate(in);
  ScaleOutEstimate e;
  e.step_seconds = step_seconds;
  e.batch_tokens = batch_tokens;
  if (in.noise_scale_tokens > 0) e.critical_batch_tokens = in.noise_scale_tokens;
  if (in.datacenters > 1) {
    if (dp % in.datacenters != 0) {
      throw Error(fmt::format(
          "the plan's data-parallel degree dp = {} does not split over --datacenters {}; give a "
          "--layout with dp divisible by {}",
          dp, in.datacenters, in.datacenters));
    }
    e.datacenters_estimated = true;
    const double gradient = parameters * in.gradient_bytes_per_parameter;
    e.sync_exchange_seconds = exchange_seconds(in, gradient);
    e.sync_step_seconds = step_seconds + e.sync_exchange_seconds;
    e.sync_efficiency = step_seconds / e.sync_step_seconds;
    e.sync_bytes_per_step = crossing_bytes(in, gradient);
  }
  if (in.diloco_inner_steps > 0 && in.datacenters > 1) {
    e.diloco_estimated = true;
    const int h = in.diloco_inner_steps, f = in.diloco_fragments;
    e.fragment_bytes = parameters * in.outer_bytes_per_parameter / f;
    e.outer_exchange_seconds = exchange_seconds(in, e.fragment_bytes);
    const double hidden = in.diloco_overlap_steps * step_seconds;
    e.outer_exposed_seconds = f * std::max(0.0, e.outer_exchange_seconds - hidden);
    e.diloco_step_seconds = step_seconds + e.outer_exposed_seconds / h;
    e.diloco_efficiency = step_seconds / e.diloco_step_seconds;
    e.diloco_bytes_per_step = f * crossing_bytes(in, e.fragment_bytes) / h;
    if (in.diloco_overlap_steps > 0) {
      e.bandwidth_to_hide =
          crossing_bytes(in, e.fragment_bytes) /
          std::max(1e-30, hidden - 2 * (in.datacenters - 1) * in.inter_dc_latency_s);
    }
  }
  return e;
}

std::vector<std::pair<std::string, std::string>> scale_out_assumptions(const ScaleOutInputs& in) {
  std::vector<std::pair<std::string, std::string>> a;
  if (in.datacenters > 1) {
    a.emplace_back(
        "data centres",
        fmt::format("{} data centres with equal shares of the GPUs; data parallelism spans them; "
                    "one aggregate link between them, {:.1f} ms one way, {:.0f} Gb/s per "
                    "direction, shared by all data-parallel groups; each exchange of N bytes is a "
                    "ring over the sites: 2(D-1) x latency + 2(D-1)/D x N / bandwidth",
                    in.datacenters, in.inter_dc_latency_s * 1e3,
                    in.inter_dc_bytes_per_second * 8e-9));
    a.emplace_back("synchronous DP across the link",
                   fmt::format("{:g}-byte gradients per parameter cross every step after the "
                               "in-centre reduction, not hidden behind compute",
                               in.gradient_bytes_per_parameter));
  }
  if (in.diloco_inner_steps > 0) {
    a.emplace_back(
        "DiLoCo",
        fmt::format("{} inner steps per outer step; {:g}-byte pseudo-gradients per parameter; {}",
                    in.diloco_inner_steps, in.outer_bytes_per_parameter,
                    in.diloco_fragments > 1
                        ? fmt::format("{} fragments on a staggered schedule, each exchange "
                                      "hidden behind {} inner steps",
                                      in.diloco_fragments, in.diloco_overlap_steps)
                        : std::string("islands wait for the exchange")));
    a.emplace_back("scaling efficiency",
                   "step time inside one data centre / step time with the link (throughput); "
                   "loss per token is not modelled (DiLoCo matches synchronous DP at H up to "
                   "~500 in Douillard et al. 2311.08105)");
  }
  if (in.noise_scale_tokens > 0) {
    a.emplace_back("critical batch",
                   "B_crit ~ the measured simple noise scale B_simple (McCandlish et al. "
                   "1812.06162 §2.2): steps S ~ S_min (1 + B_crit/B), tokens E ~ E_min (1 + "
                   "B/B_crit)");
  }
  return a;
}

std::string format_scale_out_text(const ScaleOutInputs& in, const ScaleOutEstimate& e) {
  std::string out;
  if (e.datacenters_estimated) {
    out += fmt::format("\nAcross {} data centres ({:.1f} ms, {:.0f} Gb/s link)\n", in.datacenters,
                       in.inter_dc_latency_s * 1e3, in.inter_dc_bytes_per_second * 8e-9);
    out += fmt::format("  step inside one data centre      {:10.3f} s\n", e.step_seconds);
    out += fmt::format(
        "  synchronous DP                   {:10.3f} s/step  {:5.1f}% scaling efficiency  "
        "({:.1f} GB across per step, {:.3f} s exposed)\n",
        e.sync_step_seconds, 100 * e.sync_efficiency, e.sync_bytes_per_step / 1e9,
        e.sync_exchange_seconds);
  }
  if (e.diloco_estimated) {
    const std::string kind =
        in.diloco_fragments > 1
            ? fmt::format("Streaming DiLoCo H={} F={} tau={}", in.diloco_inner_steps,
                          in.diloco_fragments, in.diloco_overlap_steps)
            : fmt::format("DiLoCo H={}", in.diloco_inner_steps);
    out += fmt::format(
        "  {:<32} {:10.3f} s/step  {:5.1f}% scaling efficiency  ({:.2f} GB across per step, "
        "{:.3f} s per exchange of {:.1f} GB)\n",
        kind, e.diloco_step_seconds, 100 * e.diloco_efficiency, e.diloco_bytes_per_step / 1e9,
        e.outer_exchange_seconds, e.fragment_bytes / 1e9);
    if (e.bandwidth_to_hide > 0) {
      out += fmt::format("  bandwidth that hides each fragment exchange: {:.1f} Gb/s\n",
                         e.bandwidth_to_hide * 8e-9);
    }
  }
  if (e.critical_batch_tokens > 0) {
    const double ratio = e.batch_tokens / e.critical_batch_tokens;
    out += fmt::format(
        "\nCritical batch (measured noise scale): {:.3g} tokens; the chosen batch is {:.3g} "
        "tokens = {:.2f}x it: {:.2f}x the minimum steps, {:.2f}x the minimum tokens\n",
        e.critical_batch_tokens, e.batch_tokens, ratio, 1 + 1 / ratio, 1 + ratio);
  }
  return out;
}

}  // namespace trillion::plan
