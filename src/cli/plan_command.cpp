// `trillion plan`: find (or evaluate) the parallel layout of a training run and answer how long
// it takes, what it costs and how often it fails; prints a table, JSON (--json) and/or an HTML
// report (--html FILE).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>

#include "cli/commands.h"
#include "cli/parse_arguments.h"
#include "cli/plan_model_file.h"
#include "core/error.h"
#include "plan/report.h"

namespace trillion::cli {

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
  app.add_option("--model", model_name,
                 "llama3-8b, llama3-70b, llama3-405b, gpt3-175b, deepseek-v3, moe-2t or a model "
                 "TOML file")
      ->required();
  app.add_option("--cluster", cluster, "h100, h800, h200, b200, gb200-nvl72 or a100")->required();
  app.add_option("--gpus", gpus, "number of GPUs")->required()->check(CLI::PositiveNumber);
  app.add_option("--tokens", tokens_text, "training tokens, e.g. 15.6T (default Chinchilla)");
  app.add_option("--seq", seq, "sequence length (default: the model's)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--batch-tokens", batch_text,
                 "tokens per step, e.g. 16Mi = 2^24 (default: the model's training batch)");
  app.add_option("--layout", layout_text,
                 "evaluate this layout, e.g. tp=8,pp=16,cp=1,dp=64; fields left out are searched");
  app.add_option("--precision", precision, "bf16, fp8, fp4 or any (searched)")
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
  app.add_option("--html", html_path, "write an HTML report to this file");
  app.add_flag("--json", json, "print the plan as JSON");
  if (const int rc = parse_arguments(app, argc, argv); rc >= 0) return rc;
  plan::PlanInputs in;
  const bool is_file =
      model_name.find(".toml") != std::string::npos || model_name.find('/') != std::string::npos;
  in.model = is_file ? read_model_file(model_name) : plan::find_model(model_name);
  in.gpu = plan::find_gpu(cluster);
  if (price > 0) in.gpu.usd_per_gpu_hour = price;  // 0: not given (the validator refuses <= 0)
  if (failure_rate >= 0) in.gpu.failures_per_gpu_hour = failure_rate / 1000 / 24;
  in.gpus = gpus;
  in.seq_len = seq;
  if (!tokens_text.empty()) in.tokens = parse_count(tokens_text, "--tokens");
  if (!batch_text.empty()) in.batch_tokens = parse_count(batch_text, "--batch-tokens");
  in.search.keep = top;
  if (!layout_text.empty()) in.search.fixed = plan::parse_layout(layout_text, &in.search.fields);
  if (precision == "any") {
    in.search.precisions = {plan::Precision::kBf16, plan::Precision::kFp8, plan::Precision::kFp4};
  } else {
    in.search.precisions = {plan::parse_precision(precision)};
  }
  in.restart_seconds = restart_minutes * 60;
  in.checkpoint_bytes_per_second = checkpoint_gbps * 1e9;
  const plan::Plan p = plan::make_plan(in);
  if (!html_path.empty()) {
    std::ofstream out(html_path);
    if (!out) throw Error(fmt::format("--html {}: cannot open the file for writing", html_path));
    out << plan::format_plan_html(p);
  }
  if (json) {
    std::cout << plan_to_json(p).dump(2) << "\n";
  } else {
    std::cout << plan::format_plan_text(p);
    if (!html_path.empty()) std::cout << "HTML report written to " << html_path << "\n";
  }
  return 0;
}

}  // namespace trillion::cli
