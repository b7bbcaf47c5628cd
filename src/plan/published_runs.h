// Published training runs the planner is calibrated on and checked against, each with its
// published layout, what it reported and how the planner's number is put in the same units:
//
// - calibration: Narayanan et al. 2104.04473 Table 1 (GPT 1.7B-1T on 32-3,072 A100, TP/PP/batch
//   per row; "we use the interleaved pipeline schedule with the scatter/gather optimization"
//   (§5.1); eq. (3) counts FLOPs "assuming activation recomputation", i.e. full recompute; fp16;
//   Megatron-LM of 2021: no sequence parallelism, no distributed optimizer, fp32 gradients). The
//   number compared is teraFLOP/s per GPU by eq. (3).
// - validation: Llama 3 405B Table 4 (2407.21783; MFU), Narayanan Table 2's PTD-P rows (GPT-3
//   175B and 530B at fixed batch on more GPUs), Korthikanti et al. 2205.05198 (530B on 2,240
//   A100: 42.1% MFU with full recompute, 54.2% with sequence parallelism + selective recompute),
//   MT-NLG 530B (Smith et al. 2201.11990 §2.4: 2,240 / 2,800 / 3,360 A100 40GB, TP8 PP35,
//   DeepSpeed's 1F1B with blocking sends; 126 / 121 / 113 TFLOP/s per GPU), BLOOM 176B (384
//   A100, TP4 PP12 DP8, Megatron-DeepSpeed, 156 TFLOP/s per GPU).
//
// Free fields (micro-batch, chunks, ZeRO where unpublished) are searched; the planner then says
// which it chose.
#pragma once

#include <string>
#include <vector>

#include "plan/plan.h"

namespace trillion::plan {

enum class RunMetric {
  kMegatronTflops,  // eq. (3) FLOPs per iteration / (step x GPUs), teraFLOP/s
  kMegatronMfu,     // Korthikanti's model FLOPs 72 B s l h^2 (1 + s/6h + V/12lh) / (step x GPUs x
                    // peak)
  kMfu,             // the planner's MFU (causal attention), as Llama 3 Table 4
};

struct PublishedRun {
  std::string name;    // "Narayanan Table 1: GPT 1.7B"
  std::string source;  // paper, table
  bool calibration = false;
  PlanInputs inputs;  // model, cluster, GPUs, seq, batch and the published layout fields
  RunMetric metric = RunMetric::kMfu;
  double published = 0;  // teraFLOP/s per GPU or MFU (fraction)
  double tolerance = 0;  // relative (TFLOP/s) or absolute (MFU points as a fraction)
};

std::vector<PublishedRun> published_runs();

struct RunCheck {
  PublishedRun run;
  Plan plan;
  double predicted = 0;
  double error = 0;  // relative for TFLOP/s, absolute for MFU
  bool within = false;
};
RunCheck check_run(const PublishedRun& run);

// The `trillion plan` command that plans the same run (model and cluster by catalog name, the
// published layout fields as --layout, including the choices the row pins: allocation, CP
// all-gather vs ring, blocking pipeline sends): its plan equals check_run's.
std::string reproduce_command(const PublishedRun& run);

// Every run checked, as a Markdown table (name, layout the planner completed, memory, predicted,
// published, error, within tolerance); `markdown` false gives the same rows as aligned text.
std::string format_validation(bool markdown);

// Narayanan et al.'s GPT (vocab 51,200, seq 2,048, GELU 4h, LayerNorm, biases, learned
// positions, dropout 0.1, materialised softmax, tied embeddings) with hidden h, a heads, l layers.
ModelSpec megatron_gpt(const std::string& name, int64_t h, int64_t a, int64_t l);

}  // namespace trillion::plan
