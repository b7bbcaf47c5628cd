// See plan_model_file.h.
#include "cli/plan_model_file.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <cmath>

#include "core/error.h"

namespace trillion::cli {

double parse_count(const std::string& text, const std::string& option) {
  if (text.empty()) throw Error(fmt::format("{} is empty", option));
  // Decimal suffixes K M B/G T, binary ones Ki Mi Gi Ti (16Mi = 2^24, Llama 3's "16M" batch).
  double scale = 1;
  std::string number = text;
  const bool binary = number.size() >= 2 && number.back() == 'i';
  if (binary) number.pop_back();
  switch (number.empty() ? '\0' : number.back()) {
    case 'K':
    case 'k':
      scale = binary ? 1024.0 : 1e3;
      break;
    case 'M':
      scale = binary ? 1048576.0 : 1e6;
      break;
    case 'B':
    case 'G':
      scale = binary ? 1073741824.0 : 1e9;
      break;
    case 'T':
      scale = binary ? 1099511627776.0 : 1e12;
      break;
    default:
      break;
  }
  if (scale != 1) number.pop_back();
  try {
    if (binary && scale == 1) throw std::invalid_argument(text);
    size_t used = 0;
    const double v = std::stod(number, &used);
    if (used != number.size() || !(v > 0) || !std::isfinite(v)) throw std::invalid_argument(text);
    return v * scale;
  } catch (const std::exception&) {
    throw Error(fmt::format("{} '{}' is not a positive count (e.g. 16777216, 16Mi = 2^24, 15.6T)",
                            option, text));
  }
}

nlohmann::json plan_to_json(const plan::Plan& p) {
  using nlohmann::json;
  auto layout_json = [](const plan::Layout& l) {
    return json{{"tp", l.tp},
                {"pp", l.pp},
                {"cp", l.cp},
                {"ep", l.ep},
                {"dp", l.dp},
                {"zero", l.zero},
                {"schedule", l.pp > 1 ? std::string(schedule::schedule_kind_name(l.schedule))
                                      : std::string("none")},
                {"chunks", l.chunks},
                {"recompute", l.recompute_text()},
                {"micro_batch", l.micro_batch},
                {"precision", plan::precision_name(l.precision)},
                {"sp", l.sp},
                {"partition", l.partition_text()},
                {"grad", l.grad_bytes == 4 ? "fp32" : "bf16"},
                {"moments", l.moment_bytes == 4 ? "fp32" : "bf16"},
                {"alloc", plan::allocation_name(l.allocation)},
                {"act", l.fp8_activations() ? "fp8" : "bf16"},
                {"ema", plan::ema_name(l.ema)},
                {"cp_comm", l.cp_all_gather ? "allgather" : "ring"},
                {"p2p", l.blocking_p2p ? "blocking" : "async"}};
  };
  auto step_json = [](const plan::StepBreakdown& s) {
    return json{{"step_seconds", s.step},
                {"microbatches", s.microbatches},
                {"compute_seconds", s.compute},
                {"recompute_seconds", s.recompute},
                {"tp_comm_seconds", s.tp_comm},
                {"cp_comm_seconds", s.cp_comm},
                {"ep_comm_seconds", s.ep_comm},
                {"bubble_seconds", s.bubble},
                {"bubble_fraction", s.bubble_fraction},
                {"dp_comm_seconds", s.dp_comm},
                {"optimizer_seconds", s.optimizer},
                {"mfu", s.mfu},
                {"mfu_palm", s.mfu_palm},
                {"mfu_bf16", s.mfu_bf16},
                {"hfu", s.hfu},
                {"tokens_per_second", s.tokens_per_second}};
  };
  const plan::Candidate& best = p.best();
  const plan::MemoryBreakdown& mem = best.step.memory;
  const plan::RunEstimate& r = p.run;
  const plan::ModelCounts c = plan::count_model(p.inputs.model);
  json j;
  j["model"] = {{"name", p.inputs.model.name},
                {"parameters", c.total},
                {"mtp_parameters", c.mtp},
                {"activated_parameters", c.activated}};
  j["cluster"] = {
      {"name", p.inputs.gpu.name}, {"gpu", p.inputs.gpu.model}, {"gpus", p.inputs.gpus}};
  j["seq_len"] = p.inputs.seq_len;
  j["batch_tokens"] = p.inputs.batch_tokens;
  j["layout"] = layout_json(best.layout);
  j["mfu"] = best.step.mfu;
  j["mfu_palm"] = best.step.mfu_palm;
  j["mfu_bf16"] = best.step.mfu_bf16;
  j["hfu"] = best.step.hfu;
  j["memory_per_gpu_bytes"] = mem.total();
  j["memory"] = {
      {"weights", mem.weights},         {"gradients", mem.gradients}, {"optimizer", mem.optimizer},
      {"activations", mem.activations}, {"temporary", mem.temporary}, {"overhead", mem.overhead},
      {"hbm", p.inputs.gpu.hbm_bytes},  {"pipeline_rank", mem.rank},  {"host_ema", mem.host_ema}};
  j["step_seconds"] = best.step.step;
  j["step"] = step_json(best.step);
  j["tokens"] = r.tokens;
  j["chinchilla_tokens"] = r.chinchilla_tokens;
  j["flops_6nd"] = r.flops_6nd;
  j["flops_exact"] = r.flops_exact;
  j["ideal_days"] = r.ideal_days;
  j["days"] = r.days;
  j["gpu_hours"] = r.gpu_hours;
  j["cost_usd"] = r.cost_usd;
  j["expected_interruptions"] = r.failures.expected_interruptions;
  j["goodput"] = r.failures.goodput;
  j["lost_per_failure_seconds"] = r.failures.lost_per_failure;
  if (p.inputs.host_repair_seconds > 0) {
    j["host_repair"] = {{"seconds", p.inputs.host_repair_seconds},
                        {"elastic", r.failures.elastic},
                        {"elastic_dp", r.elastic_dp},
                        {"repair_cost_seconds", r.failures.repair_cost},
                        {"repair_overhead_seconds", r.failures.repair_overhead}};
  }
  j["mtbf_hours"] = r.failures.mtbf_seconds / 3600;
  j["checkpoint_interval_seconds"] = r.failures.checkpoint_interval;
  j["checkpoint_bytes_per_gpu"] = r.checkpoint_bytes_per_gpu;
  json runners = json::array();
  for (const plan::Candidate& cand : p.search.ranked)
    runners.push_back({{"layout", layout_json(cand.layout)},
                       {"step_seconds", cand.step.step},
                       {"mfu", cand.step.mfu},
                       {"memory_per_gpu_bytes", cand.step.memory.total()},
                       {"bubble_fraction", cand.step.bubble_fraction}});
  j["ranked"] = runners;
  j["search"] = {{"layouts", p.search.shapes},
                 {"fitting", p.search.fitting},
                 {"schedule_simulations", p.search.simulations}};
  json refusals = json::array();
  for (const plan::Refusal& r : p.search.refusals)
    refusals.push_back({{"reason", r.reason}, {"count", r.count}, {"example", r.example}});
  j["refused"] = refusals;
  json assumptions = json::object();
  for (const auto& [name, how] : p.assumptions) assumptions[name] = how;
  j["assumptions"] = assumptions;
  return j;
}

}  // namespace trillion::cli
