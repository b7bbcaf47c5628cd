// The step model's accounting, checked against the efficiency model's own functions: the LM head
// is in the step with pp = 1 (one GEMM shape and the cross-entropy's passes over the logits), and
// ZeRO-2's per-micro-batch gradient reduce-scatter is exposed only beyond one micro-batch's work.
#include <gtest/gtest.h>

#include "plan/efficiency.h"
#include "plan/plan.h"
#include "plan/published_runs.h"
#include "plan/step_model.h"

namespace trillion::plan {
namespace {

// With pp = 1 the one stage runs every layer and the head: its forward is L layer forwards plus
// the head's logits GEMM and two passes over the fp32 logits, whatever L is.
TEST(Step, LmHeadIsInTheStepWithOneStage) {
  const Gpu& gpu = find_gpu("h100");
  const ModelSpec m = find_model("llama3-8b");
  ModelSpec shorter = m;
  shorter.n_layers = m.n_layers - 1;
  Layout l;  // one GPU, pp = 1
  const int64_t seq = 8192;
  const double batch = 4.0 * seq;
  const StepBreakdown full = model_step(m, gpu, l, seq, batch);
  const StepBreakdown less = model_step(shorter, gpu, l, seq, batch);
  EXPECT_EQ(full.microbatches, 4);
  const double layer = full.stage_forward - less.stage_forward;
  const double tokens = seq, V = static_cast<double>(m.vocab);
  const double head = linear_seconds(gpu, Precision::kBf16, tokens, V, m.d_model).forward +
                      memory_seconds(gpu, 2 * tokens * V * 4.0);
  EXPECT_GT(head, 0.05 * layer);  // 128K x 4096 logits: not negligible next to a layer
  EXPECT_NEAR(full.stage_forward, m.n_layers * layer + head, 1e-9 * full.stage_forward);
}

// ZeRO-2 reduce-scatters every micro-batch's gradients; the next micro-batch's compute hides each
// but the last, so the exposed time grows by (m - 1) x max(0, reduce-scatter - one micro-batch).
TEST(Step, ZeroTwoReduceScatterHidesBehindOneMicroBatch) {
  const ModelSpec& m = find_model("llama3-405b");
  Gpu gpu = find_gpu("h100");
  Layout l = parse_layout(
      "tp=8,pp=16,dp=64,schedule=interleaved,chunks=8,partition=balanced,recompute=selective,"
      "alloc=live");
  const int64_t seq = 8192;
  const double batch = 16.0 * 1024 * 1024;
  for (double slow : {1.0, 20.0}) {
    gpu.scaleout_bandwidth = find_gpu("h100").scaleout_bandwidth / slow;
    l.zero = 1;
    const StepBreakdown z1 = model_step(m, gpu, l, seq, batch);
    l.zero = 2;
    const StepBreakdown z2 = model_step(m, gpu, l, seq, batch);
    const LocalParams local = params_per_gpu(m, l);
    const double rs =
        reduce_scatter_seconds(link_cost(gpu, link_of(gpu, 8L * 64)), local.dense * 4.0, 64);
    const double window = z1.stage_forward + z1.stage_backward_input + z1.stage_backward_weight;
    EXPECT_EQ(z1.microbatches, 32);
    if (slow == 1.0) {
      EXPECT_LT(rs, window);  // 12.8 GB of fp32 gradients at 40 GB/s: 0.32 s
      EXPECT_DOUBLE_EQ(z2.dp_comm, z1.dp_comm);
    } else {
      EXPECT_GT(rs, window);
      EXPECT_NEAR(z2.dp_comm - z1.dp_comm, 31 * (rs - window), 1e-9 * z2.dp_comm);
    }
  }
}

// Blocking pipeline sends (DeepSpeed's PipelineEngine) put a receive and a send on every F and
// every B: each grows by two transfers of the stage's activation, W does not.
TEST(Step, BlockingSendsAddTwoTransfersToEachForwardAndBackward) {
  const ModelSpec m = megatron_gpt("gpt-530B", 20480, 128, 105);
  const Gpu& gpu = find_gpu("a100");
  Layout l =
      parse_layout("tp=8,pp=35,dp=8,sp=0,zero=1,recompute=full,schedule=1f1b,precision=fp16");
  Efficiency eff;
  const StepBreakdown async = model_step(m, gpu, l, 2048, 1920.0 * 2048, eff);
  eff.blocking_p2p = true;
  const StepBreakdown blocking = model_step(m, gpu, l, 2048, 1920.0 * 2048, eff);
  // 2048 x 20480 x 2 bytes (no SP: the whole activation) over the scale-out link.
  const double p2p = p2p_seconds(link_cost(gpu, Link::kScaleOut), 2048.0 * 20480 * 2);
  EXPECT_DOUBLE_EQ(async.p2p, p2p);
  EXPECT_NEAR(blocking.stage_forward - async.stage_forward, 2 * p2p, 1e-12);
  EXPECT_NEAR(blocking.stage_backward_input - async.stage_backward_input, 2 * p2p, 1e-12);
  EXPECT_DOUBLE_EQ(blocking.stage_backward_weight, async.stage_backward_weight);
  EXPECT_GT(blocking.step, async.step + 240 * 4 * p2p * 0.99);  // 240 micro-batches
}

}  // namespace
}  // namespace trillion::plan
