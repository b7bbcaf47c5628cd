// The step model's accounting, checked against the efficiency model's own functions: the LM head
// is in the step with pp = 1 (one GEMM shape and the cross-entropy's passes over the logits), and
// ZeRO-2's per-micro-batch gradient reduce-scatter is exposed only beyond one micro-batch's work;
// context parallelism's ring is charged the hops its block kernels do not hide.
#include <gtest/gtest.h>

#include "core/error.h"
#include "plan/context_ring.h"
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

// Full recompute reruns a MoE layer's routing and its dispatch and combine all-to-alls in backward
// (model/moe.h Moe::recompute): three exchange pairs per MoE layer and micro-batch instead of two,
// so the step's exposed ep time is 1.5 x (the engine's bytes: tests/parallel/moe_recompute_test).
TEST(Step, FullRecomputeOfMoeLayersRunsTheirExchangeAThirdTime) {
  const ModelSpec& m = find_model("deepseek-v3");
  const Gpu& gpu = find_gpu("h100");
  const int64_t seq = 4096;
  const double batch = 64.0 * 4 * seq;
  const StepBreakdown none =
      model_step(m, gpu, parse_layout("tp=1,pp=1,dp=64,ep=64,zero=1,recompute=none"), seq, batch);
  const StepBreakdown full =
      model_step(m, gpu, parse_layout("tp=1,pp=1,dp=64,ep=64,zero=1,recompute=full"), seq, batch);
  ASSERT_GT(none.ep_comm, 0);
  EXPECT_NEAR(full.ep_comm, 1.5 * none.ep_comm, 1e-9 * none.ep_comm);
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

// Ring attention's bytes per layer and micro-batch (the engine's cp counters are asserted equal
// to them in tests/parallel/context_test and context_train_test) and the time its block kernels
// do not hide: hop(S) = 1.1e-4 s and hop(2S) = 2.1e-4 s here.
TEST(Step, ContextRingBytesAndExposedSeconds) {
  EXPECT_EQ(context_ring_bytes(1, 100).total(), 0u);
  EXPECT_EQ(context_ring_bytes(2, 100).forward, 100u);
  EXPECT_EQ(context_ring_bytes(2, 100).backward, 300u);
  EXPECT_EQ(context_ring_bytes(4, 100).forward, 300u);
  EXPECT_EQ(context_ring_bytes(4, 100).backward, 700u);
  const LinkCost link{1e-5, 1e10};
  const double S = 1e6, one = 1.1e-4, two = 2.1e-4;
  // No compute: every hop exposed; backward's steps 1..cp-2 carry a K/V and a dK/dV block.
  const RingSeconds bare = context_ring_exposed_seconds(4, S, link, 0, 0);
  EXPECT_NEAR(bare.forward, 3 * one, 1e-15);
  EXPECT_NEAR(bare.backward, 3 * one + 2 * two, 1e-15);
  // Steps longer than their hops: only backward's last dK/dV hop (after the last kernel).
  const RingSeconds hidden = context_ring_exposed_seconds(4, S, link, 4e-3, 1e-2);
  EXPECT_EQ(hidden.forward, 0.0);
  EXPECT_NEAR(hidden.backward, one, 1e-15);
  // In between: 1e-4 s of forward kernels per step, 1.5e-4 s of backward.
  const RingSeconds part = context_ring_exposed_seconds(4, S, link, 4e-4, 6e-4);
  EXPECT_NEAR(part.forward, 3 * (one - 1e-4), 1e-15);
  EXPECT_NEAR(part.backward, 2 * (two - 1.5e-4) + one, 1e-15);
  EXPECT_EQ(context_ring_exposed_seconds(1, S, link, 0, 0).backward, 0.0);
}

// MLA's two rings at DeepSeek-V3's sizes (NH 128, DN 128, DR 64, VD 128, DC 512): per token the
// per-head ring carries NH/tp (DN + DR + VD) = 40960/tp elements, the latent DC + DR = 576, so
// auto picks the latent at every tp up to 64 (640 > 576) and the heads from tp 128 (320 < 576);
// the latent's buffers add 2 per-head blocks; its recompute is U = 2 * tokens * DC * NH/tp *
// (DN + VD) per remote block, (cp - 1) U forward and 3 (cp - 1) U backward.
TEST(Step, MlaRingsOverTheCheaperOfLatentAndHeads) {
  const ModelSpec m = find_model("deepseek-v3");
  ASSERT_EQ(m.n_heads, 128);
  ASSERT_EQ(m.kv_lora_rank + m.qk_rope_dim, 576);
  ASSERT_EQ(m.qk_dim() + m.v_dim(), 320);
  const int64_t tokens = 4096;  // per rank: batch 1, seq 4096 * cp
  for (int64_t tp : {1, 8, 64, 128}) {
    const TensorSplit split{tp, true, 4};
    const bool latent = tp < 128;
    EXPECT_EQ(context_ring_latent(m, split), latent) << tp;
    EXPECT_EQ(context_ring_block_bytes(m, 1, 4 * tokens, 2, split),
              tokens * 2 * (latent ? 576 : 128 / tp * 320))
        << tp;
    EXPECT_EQ(context_ring_block_bytes(m, 1, 4 * tokens, 2, split, CpMla::heads),
              tokens * 2 * (128 / tp * 320));
    EXPECT_EQ(context_ring_block_bytes(m, 1, 4 * tokens, 2, split, CpMla::latent),
              tokens * 2 * 576);
    EXPECT_EQ(context_ring_buffer_bytes(m, 1, 4 * tokens, 2, split, CpMla::latent),
              5 * tokens * 2 * 576 + 2 * tokens * 2 * (128 / tp * 320));
    const double U = 2.0 * tokens * 512 * (128 / tp) * 256;
    const RingFlops f = context_ring_recompute_flops(m, 1, 4 * tokens, split, CpMla::latent);
    EXPECT_EQ(f.forward, 3 * U);
    EXPECT_EQ(f.backward, 9 * U);
    EXPECT_EQ(context_ring_recompute_flops(m, 1, 4 * tokens, split, CpMla::heads).forward, 0.0);
  }
  EXPECT_FALSE(context_ring_latent(find_model("llama3-8b"), {1, false, 4}, CpMla::latent));
  EXPECT_EQ(parse_cp_mla("auto", "x"), CpMla::automatic);
  EXPECT_THROW(parse_cp_mla("kv", "parallel.cp_mla"), Error);
}

// model_step charges the ring of plan/context_ring.h per layer and micro-batch: llama3-8b at
// tp 8 x cp 4 (the ring leaves the 8-GPU NVLink domain), 64K tokens, 16K per rank, one K/V
// block of 16384 x 1 kv head x 256 x 2 bytes. On the H100's link the block kernels hide every
// hop but the last dK/dV one, and the ring beats Llama 3's exposed all-gather
// (Efficiency::cp_all_gather: (cp - 1) blocks each way); on a 100x slower link the hops show and
// the ring, moving more bytes, is the slower. Selective recompute replays the forward ring.
TEST(Step, ContextParallelRingIsChargedWhatItsBlocksDoNotHide) {
  const ModelSpec m = find_model("llama3-8b");
  const Gpu base = find_gpu("h100");
  Layout l = parse_layout("tp=8,cp=4,pp=1,dp=1");
  const int64_t seq = 65536;
  const double batch = 2.0 * seq;  // 2 micro-batches
  const double block = static_cast<double>(context_ring_block_bytes(m, 1, seq, 2, {8, true, 4}));
  EXPECT_EQ(block, 16384.0 * 1 * 256 * 2);
  const double per_rank_attention =
      16384 * attention_flops_per_token_layer(m, seq, AttentionFlops::kCausal) / 3 / 8;
  for (double slow : {1.0, 100.0}) {
    Gpu gpu = base;
    gpu.scaleout_bandwidth = base.scaleout_bandwidth / slow;
    const LinkCost link = link_cost(gpu, Link::kScaleOut);
    const double f = flash_attention_forward_seconds(gpu, per_rank_attention, 16384);
    const RingSeconds ring =
        context_ring_exposed_seconds(4, block, link, f, kFlashBackwardRatio * f);
    Efficiency eff;
    l.recompute = Recompute::kNone;
    const StepBreakdown r = model_step(m, gpu, l, seq, batch, eff);
    EXPECT_EQ(r.microbatches, 2);
    EXPECT_NEAR(r.cp_comm, 2 * 32 * (ring.forward + ring.backward), 1e-9 * r.cp_comm) << slow;
    if (slow == 1.0) {
      EXPECT_EQ(ring.forward, 0.0);
      EXPECT_NEAR(ring.backward, p2p_seconds(link, block), 1e-15);
    } else {
      EXPECT_GT(ring.forward, 0.0);
      EXPECT_GT(ring.backward, 3 * p2p_seconds(link, block));
    }
    l.recompute = Recompute::kSelective;
    const StepBreakdown selective = model_step(m, gpu, l, seq, batch, eff);
    EXPECT_NEAR(selective.cp_comm, 2 * 32 * (2 * ring.forward + ring.backward),
                1e-9 * selective.cp_comm)
        << slow;
    l.recompute = Recompute::kNone;
    eff.cp_all_gather = true;
    const StepBreakdown gathered = model_step(m, gpu, l, seq, batch, eff);
    EXPECT_NEAR(gathered.cp_comm, 2 * 32 * 2 * all_gather_seconds(link, 4 * block, 4),
                1e-9 * gathered.cp_comm);
    if (slow == 1.0) {  // hidden, the ring beats the all-gather
      EXPECT_LT(r.cp_comm, gathered.cp_comm);
      EXPECT_GT(gathered.step, r.step);
    } else {  // nothing to hide behind: 3 cp - 2 hops of S cost more than 2 (cp - 1)
      EXPECT_GT(r.cp_comm, gathered.cp_comm);
    }
  }
}

}  // namespace
}  // namespace trillion::plan
