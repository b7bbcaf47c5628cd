// A parallel layout of a training run: the degrees of tensor (+sequence), pipeline, context,
// expert and data parallelism, the ZeRO stage, the pipeline schedule, recompute policy,
// micro-batch size and precision. Text form "tp=8,pp=16,cp=1,ep=1,dp=64,zero=1,
// schedule=interleaved,chunks=4,recompute=selective,micro_batch=1,precision=bf16".
//
// Invariants: gpus() = tp * pp * cp * dp (EP is carved out of dp x cp, as in DESIGN.md's mesh,
// so it does not multiply the GPU count); sequence parallelism is on whenever tp > 1.
#pragma once

#include <string>

#include "plan/hardware.h"
#include "schedule/action.h"

namespace trillion::plan {

enum class Recompute { kNone, kSelective, kFull };
std::string recompute_name(Recompute r);
Recompute parse_recompute(const std::string& name);  // none, selective, full

struct Layout {
  int tp = 1, pp = 1, cp = 1, ep = 1, dp = 1;
  int zero = 1;  // 0..3
  schedule::ScheduleKind schedule = schedule::ScheduleKind::k1F1B;
  int chunks = 1;  // v: interleaved chunks per rank (DualPipe: 2, its two copies)
  Recompute recompute = Recompute::kNone;
  int micro_batch = 1;  // sequences per micro-batch
  Precision precision = Precision::kBf16;

  long gpus() const { return static_cast<long>(tp) * pp * cp * dp; }
  std::string to_string() const;
};

// Which fields a --layout string set, so the planner can search the rest.
struct LayoutFields {
  bool tp = false, pp = false, cp = false, ep = false, dp = false, zero = false, schedule = false,
       chunks = false, recompute = false, micro_batch = false, precision = false;
};

// Parses "tp=8,pp=16,dp=64,..."; unknown keys or bad values throw trillion::Error naming them.
Layout parse_layout(const std::string& text, LayoutFields* fields = nullptr);

}  // namespace trillion::plan
