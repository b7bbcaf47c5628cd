// Training across data centres: the step time and scaling efficiency of synchronous data
// parallelism over an inter-data-centre link versus DiLoCo (Douillard et al. 2311.08105), which
// exchanges pseudo-gradients only every H inner steps, and Streaming DiLoCo (2501.18512), which
// exchanges 1/F of them at a time, each overlapped with tau inner steps; plus the critical batch
// from a measured gradient noise scale (McCandlish et al. 1812.06162).
//
// Model (every assumption is listed by scale_out_assumptions):
// - The plan's GPUs are split evenly over D data centres; its data-parallel degree spans them
//   (dp % D == 0) and its step time is what one step costs inside a data centre (an island of
//   dp/D replicas with 1/D of the batch does the same work per GPU).
// - The link between data centres is one aggregate pipe per direction (bandwidth beta, one-way
//   latency alpha) shared by all data-parallel groups: together they move the whole model's
//   gradient (or pseudo-gradient), so the exchange of N bytes is the ring over D sites,
//   2 (D-1) alpha + 2 (D-1)/D N / beta (plan/collectives.h), whatever the layout.
// - Synchronous DP: every step the bf16 gradients cross after the in-centre reduction
//   (hierarchical), exposed (it cannot start before the step's last gradients exist, and the
//   next step needs its result).
// - DiLoCo: every H steps the pseudo-gradients (fp32, or bf16 / 4-bit when quantised) cross,
//   the islands waiting for it: step = T + exchange / H.
// - Streaming DiLoCo: F fragment exchanges of N/F bytes per H steps, each hidden behind tau
//   inner steps: exposed per fragment max(0, exchange(N/F) - tau T).
// - Scaling efficiency = T / (time per step with the link): throughput against the same GPUs in
//   one data centre. It says nothing of loss per token (DiLoCo's is measured by the engine).
//
// Invariants: seconds, bytes, bytes/s; efficiencies in (0, 1]; bytes are per direction of the
// inter-data-centre link per step.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace trillion::plan {

struct ScaleOutInputs {
  int datacenters = 1;                        // D; 1: no cross-data-centre estimate
  double inter_dc_latency_s = 0.005;          // one way; ~1,000 km of fibre
  double inter_dc_bytes_per_second = 12.5e9;  // aggregate per direction (100 Gb/s)
  int diloco_inner_steps = 0;                 // H; 0: DiLoCo not estimated
  int diloco_fragments = 1;                   // F (Streaming DiLoCo); 1: plain DiLoCo
  int diloco_overlap_steps = 0;             // tau: inner steps one fragment's exchange may hide in
  double outer_bytes_per_parameter = 4;     // fp32 pseudo-gradients; bf16 2; 4-bit ~0.5
  double gradient_bytes_per_parameter = 2;  // synchronous DP's bf16 gradients
  double noise_scale_tokens = 0;            // measured B_simple in tokens; 0: none
};

struct ScaleOutEstimate {
  bool datacenters_estimated = false, diloco_estimated = false;
  double step_seconds = 0;  // T: one step inside a data centre
  // Synchronous data parallelism across the link.
  double sync_exchange_seconds = 0, sync_step_seconds = 0, sync_efficiency = 1;
  double sync_bytes_per_step = 0;
  // DiLoCo (F = 1) or Streaming DiLoCo (F > 1), amortised per inner step.
  double outer_exchange_seconds = 0;  // one fragment's exchange
  double outer_exposed_seconds = 0;   // per H steps
  double diloco_step_seconds = 0, diloco_efficiency = 1;
  double diloco_bytes_per_step = 0;
  double fragment_bytes = 0;     // one exchange's bytes
  double bandwidth_to_hide = 0;  // bytes/s that would hide a fragment in tau steps
  // Critical batch (McCandlish): steps ~ S_min (1 + B_crit / B), tokens ~ E_min (1 + B / B_crit).
  double batch_tokens = 0, critical_batch_tokens = 0;
};

// parameters: the model's total parameter count; step_seconds: the plan's step; dp: its
// data-parallel degree (must be divisible by the data centres).
ScaleOutEstimate estimate_scale_out(const ScaleOutInputs& in, double parameters,
                                    double step_seconds, int dp, double batch_tokens);

std::vector<std::pair<std::string, std::string>> scale_out_assumptions(const ScaleOutInputs& in);

// The terminal section; empty when nothing was estimated.
std::string format_scale_out_text(const ScaleOutInputs& in, const ScaleOutEstimate& e);

}  // namespace trillion::plan
