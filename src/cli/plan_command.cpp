// `trillion plan`: find (or evaluate) the parallel layout of a training run and answer how long
// it takes, what it costs and how often it fails; prints a table, JSON (--json) and/or an HTML
// report (--html FILE).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/parse_arguments.h"
#include "cli/plan_model_file.h"
#include "cli/plan_run_config.h"
#include "core/error.h"
#include "optim/outer_quantize.h"
#include "plan/document_attention.h"
#include "plan/model_file.h"
#include "plan/plan_file.h"
#include "plan/prefill.h"
#include "plan/published_runs.h"
#include "plan/report.h"
#include "precision/recipe.h"

namespace trillion::cli {

namespace {

// The engine's [precision] settings that train the plan's layout (precision/recipe.h); fp16 and
// bf16 moments have none, and the line says so.
precision::EngineRecipe engine_recipe(const plan::Layout& l) {
  return precision::engine_recipe_for_plan(plan::precision_name(l.precision), l.grad_bytes,
                                           l.moment_bytes);
}

// The plan's text with an "Engine" line after its "Layout" line.
// The plan's text with `line` put before its Stages line (after the Layout line's block).
std::string with_line(std::string text, const std::string& line) {
  const size_t at = text.find("\nStages    ");
  return at == std::string::npos ? text + line : text.insert(at + 1, line);
}

std::string with_engine_line(const std::string& text, const plan::Layout& l) {
  return with_line(text, "Engine    " + engine_recipe(l).note + "\n");
}

// --document-lengths 8:0.5,40:0.3,200:0.2: lengths (tokens) and their weights.
plan::DocumentLengths parse_document_lengths(const std::string& text) {
  plan::DocumentLengths d;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t end = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, end - at);
    const size_t colon = item.find(':');
    try {
      size_t used = 0;
      if (colon == std::string::npos) throw std::invalid_argument(item);
      d.length.push_back(std::stoll(item.substr(0, colon), &used));
      if (used != colon) throw std::invalid_argument(item);
      d.weight.push_back(std::stod(item.substr(colon + 1), &used));
      if (used != item.size() - colon - 1) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw Error(
          fmt::format("--document-lengths: '{}' is not LENGTH:WEIGHT (e.g. "
                      "8:0.5,40:0.3,200:0.2)",
                      item));
    }
    at = end + 1;
  }
  return d;
}

// `trillion plan --prefill TOKENS`: the fastest tp x cp x pp (and cp variant) for one
// sequence's prefill on the given GPUs (plan/prefill.h).
int prefill(const std::string& model_name, const std::string& cluster, long gpus,
            const std::string& tokens_text, const std::string& layout_text,
            const std::string& precision, const std::string& linears, int top, bool json) {
  if (model_name.empty() || cluster.empty() || gpus == 0)
    throw Error("plan --prefill needs --model, --cluster and --gpus");
  if (linears != "all" && linears != "ffn")
    throw Error(fmt::format("--linears {}: all or ffn", linears));
  const plan::ModelSpec m = resolve_plan_model(model_name);
  const plan::Gpu gpu = plan::resolve_cluster(cluster);
  const double tokens = parse_count(tokens_text, "--prefill");
  if (!(tokens >= 1) || tokens > static_cast<double>(plan::kMaxSeqLen) ||
      tokens != std::floor(tokens))
    throw Error(fmt::format("--prefill {}: a whole number of tokens from 1 to {} (2^24)",
                            tokens_text, plan::kMaxSeqLen));
  plan::LayoutFields f;
  const plan::Layout fixed =
      layout_text.empty() ? plan::Layout{} : plan::parse_layout(layout_text, &f);
  std::vector<plan::Precision> precisions;
  if (f.precision)
    precisions = {fixed.precision};
  else if (precision == "any")
    precisions = {plan::Precision::kBf16, plan::Precision::kFp8, plan::Precision::kFp4};
  else
    precisions = {plan::parse_precision(precision)};
  const auto S = static_cast<int64_t>(tokens);
  const plan::PrefillSearch s = plan::search_prefill(
      m, gpu, gpus, S, precisions, f.tp ? fixed.tp : 0, f.cp ? fixed.cp : 0, f.pp ? fixed.pp : 0,
      f.cp_comm ? (fixed.cp_all_gather ? 1 : 0) : -1, top, linears == "ffn");
  if (!json) {
    std::cout << plan::format_prefill_text(m, gpu, gpus, S, s);
    return 0;
  }
  auto one = [](const plan::PrefillEstimate& e) {
    return nlohmann::json{{"layout",
                           {{"tp", e.layout.tp},
                            {"cp", e.layout.cp},
                            {"pp", e.layout.pp},
                            {"cp_comm", e.layout.cp_all_gather ? "allgather" : "ring"},
                            {"precision", plan::precision_name(e.layout.precision)},
                            {"linears", e.layout.low_precision_ffn_only ? "ffn" : "all"}}},
                          {"prefill_seconds", e.seconds},
                          {"seconds",
                           {{"gemm", e.gemm},
                            {"attention", e.attention},
                            {"elementwise", e.elementwise},
                            {"tp_comm", e.tp_comm},
                            {"cp_comm", e.cp_comm},
                            {"pp_comm", e.pp_comm},
                            {"first_logits", e.head}}},
                          {"memory_per_gpu_bytes", e.memory()},
                          {"memory",
                           {{"weights", e.weights},
                            {"kv_cache", e.kv_cache},
                            {"workspace", e.workspace},
                            {"overhead", e.overhead}}},
                          {"model_flops", e.model_flops}};
  };
  nlohmann::json j = one(s.ranked.front());
  j["model"] = m.name;
  j["gpu"] = gpu.model;
  j["gpus"] = gpus;
  j["tokens"] = S;
  j["hbm"] = gpu.hbm_bytes;
  j["considered"] = s.considered;
  j["did_not_fit"] = s.too_big;
  j["runners_up"] = nlohmann::json::array();
  for (const plan::PrefillEstimate& e : s.ranked) j["runners_up"].push_back(one(e));
  std::cout << j.dump(2) << "\n";
  return 0;
}

}  // namespace

int plan_command(int argc, char** argv) {
  CLI::App app{
      "Plan a training run: parallel layout, memory, step time, MFU, days, dollars and "
      "failures.",
      "trillion plan"};
  std::string model_name, cluster, tokens_text, batch_text, layout_text, precision = "bf16",
                                                                         html_path;
  long gpus = 0;
  int64_t seq = 0;
  int top = 5;
  double restart_minutes = 10, checkpoint_gbps = 0.4, price = 0, failure_rate = -1;
  bool json = false;
  plan::ScaleOutInputs scale_out;
  double inter_dc_latency_ms = scale_out.inter_dc_latency_s * 1e3,
         inter_dc_gbps = scale_out.inter_dc_bytes_per_second * 8e-9;
  std::string outer_precision = "fp32";
  app.add_option("--model", model_name,
                 "llama3-8b, llama3-70b, llama3-405b, gpt3-175b, deepseek-v3, moe-2t, a model "
                 "TOML file (configs/models/) or an engine run config (configs/*.toml: its model, "
                 "batch and tokens; the keys it ignores are listed)");
  app.add_option("--cluster", cluster,
                 "a100, h100, h800, h200, b200, gb200-nvl72 or a cluster TOML file");
  // Integer ranges print as "1 to 16777216" (CLI::PositiveNumber printed DBL_MAX's 309 digits).
  app.add_option("--gpus", gpus, "number of GPUs")->check(CLI::Range(1L, plan::kMaxGpus));
  bool validate = false;
  std::vector<std::string> compare;
  app.add_option("--compare", compare,
                 "plan two plan files (configs/plans/NAME or a path) and print them side by side")
      ->expected(2);
  int chunks = 0;
  app.add_option("--chunks", chunks,
                 "interleaved chunks per rank V (same as --layout ...,chunks=V)")
      ->check(CLI::Range(1, 1 << 14));  // at most one layer per chunk
  app.add_flag("--validate", validate,
               "plan every published run of plan/published_runs.h and print predicted vs "
               "published");
  app.add_option("--tokens", tokens_text, "training tokens, e.g. 15.6T (default Chinchilla)");
  std::string prefill_text;
  app.add_option("--prefill", prefill_text,
                 "plan inference prefill instead: time to first token for one sequence of this "
                 "many tokens (e.g. 1Mi) on --gpus GPUs; --layout may fix tp, cp, pp, cp_comm");
  std::string linears = "all";
  app.add_option("--linears", linears,
                 "with --prefill and an 8- or 4-bit --precision: all linears in it, or ffn (the "
                 "attention projections in bf16, Llama 3's FP8 inference)")
      ->capture_default_str();
  app.add_option("--seq", seq, "sequence length (default: the model's)")
      ->check(CLI::Range(int64_t{1}, plan::kMaxSeqLen));
  app.add_option("--batch-tokens", batch_text,
                 "tokens per step, e.g. 16Mi = 2^24 (default: the model's training batch)");
  app.add_option("--layout", layout_text,
                 "evaluate this layout, e.g. tp=8,pp=16,cp=1,dp=64; fields left out are searched");
  app.add_option("--precision", precision, "bf16, fp16, fp8, fp4 or any (searched)")
      ->capture_default_str();
  app.add_option("--top", top, "runners-up to show")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--restart-minutes", restart_minutes, "cost of one interruption")
      ->capture_default_str()
      ->check(finite_at_least(0));
  app.add_option("--checkpoint-gbps", checkpoint_gbps, "checkpoint write GB/s per GPU")
      ->capture_default_str()
      ->check(finite_positive());
  app.add_option("--price", price, "USD per GPU-hour (default: the catalog's)")
      ->check(finite_positive());
  app.add_option("--failures-per-1000-gpu-days", failure_rate,
                 "failure rate (default: the catalog's; Llama 3 observed 0.47)")
      ->check(finite_at_least(0));
  double host_repair_hours = 0;
  bool elastic = false;
  int host_gpus = 8;
  app.add_option("--host-repair-hours", host_repair_hours,
                 "a failure takes a host out this long (default 0: a spare replaces it at once)")
      ->check(finite_at_least(0));
  app.add_flag("--elastic", elastic,
               "with --host-repair-hours: run on the surviving hosts while one is repaired "
               "(fewer dp replicas, as launch --elastic), when that is cheaper than waiting");
  app.add_option("--host-gpus", host_gpus, "GPUs per host (what one host failure takes out)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--html", html_path, "write an HTML report to this file");
  app.add_flag("--json", json, "print the plan as JSON");
  app.add_option("--datacenters", scale_out.datacenters,
                 "data centres the GPUs are split over (2+: estimate synchronous DP and DiLoCo "
                 "across the link between them)")
      ->capture_default_str();
  app.add_option("--inter-dc-latency-ms", inter_dc_latency_ms,
                 "one-way latency between data centres (5 ms ~ 1,000 km of fibre)")
      ->capture_default_str();
  app.add_option("--inter-dc-gbps", inter_dc_gbps,
                 "bandwidth between data centres, Gb/s per direction, shared by all GPUs")
      ->capture_default_str();
  app.add_option("--diloco-inner-steps", scale_out.diloco_inner_steps,
                 "DiLoCo's H: inner steps between outer synchronisations (0: no estimate)")
      ->capture_default_str();
  app.add_option("--diloco-fragments", scale_out.diloco_fragments,
                 "Streaming DiLoCo's fragments, synchronised H/F steps apart")
      ->capture_default_str();
  app.add_option("--diloco-overlap-steps", scale_out.diloco_overlap_steps,
                 "inner steps each fragment's exchange overlaps (Streaming DiLoCo's tau)")
      ->capture_default_str();
  app.add_option("--outer-precision", outer_precision,
                 "DiLoCo's exchanged pseudo-gradients: fp32, bf16 or fp4 (with per-128 scales)")
      ->capture_default_str();
  app.add_option("--noise-scale-tokens", scale_out.noise_scale_tokens,
                 "measured gradient noise scale B_simple in tokens (the trainer's "
                 "gradient_noise_scale): prints the critical batch next to the chosen one");
  std::vector<double> goodput_at;
  app.add_option("--goodput-at", goodput_at,
                 "MTBF_S,INTERVAL_S,WRITE_S,RESTART_S: print the failure model's goodput at that "
                 "checkpoint interval (seconds of training between checkpoints) and exit")
      ->delimiter(',')
      ->expected(4);
  std::string document_lengths;
  app.add_option("--document-lengths", document_lengths,
                 "LENGTH:WEIGHT,...: print the attention FLOPs of --model's packed sequences of "
                 "--seq tokens under a document mask, for documents of these lengths, and exit");
  if (const int rc = parse_arguments(app, argc, argv); rc >= 0) return rc;
  if (!document_lengths.empty()) {
    if (model_name.empty()) throw Error("--document-lengths needs --model");
    const plan::ModelSpec m = resolve_plan_model(model_name);
    const int64_t T = seq > 0 ? seq : m.default_seq;
    const plan::DocumentLengths d = parse_document_lengths(document_lengths);
    const double fraction = plan::document_attention_fraction(d, T);
    const double causal =
        plan::attention_flops_per_token_layer(m, T, plan::AttentionFlops::kCausal);
    const double model = plan::model_flops_per_token(m, T, plan::AttentionFlops::kCausal);
    std::cout << fmt::format(
        "document mask, {} at T = {}: {:.1f} visible (query, key) pairs per sequence and head, "
        "{:.4f} of causal; attention {:.4g} FLOPs per token and layer (causal {:.4g}); model "
        "FLOPs per token {:.4g} (causal {:.4g})\n",
        m.name, T, plan::document_visible_pairs(d, T), fraction, causal * fraction, causal,
        model - static_cast<double>(m.n_layers) * causal * (1 - fraction), model);
    // Ring attention's balance under the mask: worst rank / mean, zigzag vs contiguous.
    std::string balance;
    for (int64_t cp = 2; cp <= 16 && T % (2 * cp) == 0; cp *= 2) {
      balance += fmt::format("{}cp {} {:.3f} vs {:.3f}", balance.empty() ? "" : ", ", cp,
                             plan::document_cp_balance(d, T, cp, true),
                             plan::document_cp_balance(d, T, cp, false));
    }
    if (!balance.empty()) {
      std::cout << "context parallelism, worst rank's attention work over the mean, zigzag vs "
                   "contiguous: "
                << balance << "\n";
    }
    return 0;
  }
  if (!goodput_at.empty()) {
    const plan::IntervalGoodput g =
        plan::goodput_at_interval(goodput_at[0], goodput_at[1], goodput_at[2], goodput_at[3]);
    std::cout << fmt::format(
        "failure model: MTBF {:.1f} s, a checkpoint every {:.2f} s of training written in {:.3f} "
        "s, restart {:.2f} s: {:.2f} s lost per failure, kept {:.3f} (the supervisor's goodput), "
        "goodput {:.3f} (checkpoint writes counted as lost too)\n",
        goodput_at[0], goodput_at[1], goodput_at[2], goodput_at[3], g.lost_per_failure, g.kept,
        g.goodput);
    return 0;
  }
  if (validate) {
    std::cout << plan::format_validation(true);
    return 0;
  }
  if (!prefill_text.empty())
    return prefill(model_name, cluster, gpus, prefill_text, layout_text, precision, linears, top,
                   json);
  if (linears != "all") throw Error("--linears is a --prefill option");
  if (!compare.empty()) {
    const plan::PlanFile a = plan::resolve_plan(compare[0]), b = plan::resolve_plan(compare[1]);
    const plan::Plan pa = plan::make_plan(a.inputs), pb = plan::make_plan(b.inputs);
    std::cout << plan::format_comparison(a, pa, b, pb);
    return 0;
  }
  if (model_name.empty() || cluster.empty() || gpus == 0)
    throw Error("plan needs --model, --cluster and --gpus (or --validate, or --compare A B)");
  plan::PlanInputs in;
  std::optional<RunConfigModel> run_config;
  in.model = resolve_plan_model(model_name, &run_config);
  if (run_config && tokens_text.empty()) in.tokens = run_config->tokens;
  in.gpu = plan::resolve_cluster(cluster);
  if (price > 0) in.gpu.usd_per_gpu_hour = price;
  if (failure_rate >= 0) in.gpu.failures_per_gpu_hour = failure_rate / 1000 / 24;
  in.gpus = gpus;
  in.seq_len = seq;
  if (!tokens_text.empty()) in.tokens = parse_count(tokens_text, "--tokens");
  if (!batch_text.empty()) in.batch_tokens = parse_count(batch_text, "--batch-tokens");
  in.search.keep = top;
  if (!layout_text.empty()) in.search.fixed = plan::parse_layout(layout_text, &in.search.fields);
  if (chunks > 0) {
    if (in.search.fields.chunks && in.search.fixed.chunks != chunks)
      throw Error(fmt::format("--chunks {} contradicts --layout chunks={}", chunks,
                              in.search.fixed.chunks));
    in.search.fixed.chunks = chunks;
    in.search.fields.chunks = true;
  }
  if (precision == "any") {
    in.search.precisions = {plan::Precision::kBf16, plan::Precision::kFp16, plan::Precision::kFp8,
                            plan::Precision::kFp4};
  } else {
    in.search.precisions = {plan::parse_precision(precision)};
  }
  in.restart_seconds = restart_minutes * 60;
  if (elastic && host_repair_hours <= 0)
    throw Error("--elastic needs --host-repair-hours (how long a failed host is out)");
  in.host_repair_seconds = host_repair_hours * 3600;
  in.elastic = elastic;
  in.host_gpus = host_gpus;
  in.checkpoint_bytes_per_second = checkpoint_gbps * 1e9;
  scale_out.inter_dc_latency_s = inter_dc_latency_ms / 1e3;
  scale_out.inter_dc_bytes_per_second = inter_dc_gbps * 1e9 / 8;
  scale_out.outer_bytes_per_parameter =
      outer_bytes_per_element(parse_outer_precision(outer_precision, "--outer-precision"));
  in.scale_out = scale_out;
  // Planning an engine run config: only layouts the engine trains are searched, split evenly as
  // the engine splits its stages by default (--layout partition=a/b/... plans the counts the
  // engine then takes as parallel.partition; balanced it refuses).
  const int64_t planned_seq = seq > 0 ? seq : in.model.default_seq;
  const double planned_sequences =
      (in.batch_tokens > 0 ? in.batch_tokens : in.model.default_batch_tokens) /
      static_cast<double>(planned_seq);
  if (run_config) {
    if (!in.search.fields.partition) {
      in.search.fixed.partition = plan::Partition::kEven;
      in.search.fields.partition = true;
    }
    in.search.engine_refusal = [&](const plan::Layout& l) {
      return engine_launch(l, *run_config, planned_sequences, planned_seq).refusal;
    };
  }
  plan::Plan p;
  try {
    p = plan::make_plan(in);
  } catch (const Error& e) {
    if (!run_config || !batch_text.empty()) throw;
    throw Error(
        fmt::format("{}\n(the batch is {}'s train.micro_batch x train.grad_accum "
                    "sequences; --batch-tokens plans another)",
                    e.what(), run_config->path));
  }
  if (run_config) {
    const bool batch_given =
        !batch_text.empty() || (seq > 0 && seq != run_config->model.default_seq);
    add_run_config_assumptions(p, *run_config, batch_given, !tokens_text.empty());
  }
  if (!html_path.empty()) {
    std::ofstream out(html_path);
    if (!out) throw Error(fmt::format("--html {}: cannot open the file for writing", html_path));
    out << plan::format_plan_html(p);
  }
  if (json) {
    nlohmann::json j = plan_to_json(p);
    if (run_config) {
      j["run_config"] = run_config_json(*run_config);
      auto launch_json = [&](const plan::Layout& l) {
        const EngineLaunch e = engine_launch(l, *run_config, planned_sequences, planned_seq);
        return nlohmann::json{
            {"ranks", e.ranks}, {"settings", e.settings}, {"command", e.command(run_config->path)}};
      };
      j["launch"] = launch_json(p.best().layout);
      for (size_t i = 0; i < p.search.ranked.size() && i < j["ranked"].size(); ++i)
        j["ranked"][i]["launch"] = launch_json(p.search.ranked[i].layout);
    }
    const precision::EngineRecipe engine = engine_recipe(p.best().layout);
    j["engine_recipe"] = {
        {"recipe", engine.recipe.empty() ? nlohmann::json() : nlohmann::json(engine.recipe)},
        {"grad_dtype", engine.grad_dtype},
        {"note", engine.note}};
    const plan::ScaleOutEstimate& e = p.scale_out;
    if (e.datacenters_estimated || e.critical_batch_tokens > 0) {
      j["scale_out"] = {{"datacenters", in.scale_out.datacenters},
                        {"step_seconds", e.step_seconds},
                        {"sync_step_seconds", e.sync_step_seconds},
                        {"sync_efficiency", e.sync_efficiency},
                        {"sync_bytes_per_step", e.sync_bytes_per_step},
                        {"diloco_inner_steps", in.scale_out.diloco_inner_steps},
                        {"diloco_step_seconds", e.diloco_step_seconds},
                        {"diloco_efficiency", e.diloco_efficiency},
                        {"diloco_bytes_per_step", e.diloco_bytes_per_step},
                        {"outer_exchange_seconds", e.outer_exchange_seconds},
                        {"critical_batch_tokens", e.critical_batch_tokens}};
    }
    std::cout << j.dump(2) << "\n";
  } else {
    std::string text = with_engine_line(plan::format_plan_text(p), p.best().layout);
    if (run_config) {
      const EngineLaunch e =
          engine_launch(p.best().layout, *run_config, planned_sequences, planned_seq);
      text = with_line(text, "Launch    " + e.command(run_config->path) + "\n");
    }
    std::cout << text << plan::format_scale_out_text(in.scale_out, p.scale_out);
    if (!html_path.empty()) std::cout << "HTML report written to " << html_path << "\n";
  }
  return 0;
}

}  // namespace trillion::cli
