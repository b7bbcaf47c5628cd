// DeepSeek-V3's memory techniques as planner choices (§3.2.3, §3.3.3), each in exact bytes:
// norm-up recompute, the FP8 activation cache, BF16 Adam moments, the EMA on the GPU or in host
// memory; and the published layout (2,048 H800, PP16 DualPipe, EP64, ZeRO-1, FP8) fitting
// without full recomputation.
#include <gtest/gtest.h>

#include "core/error.h"
#include "plan/memory.h"
#include "plan/plan.h"

namespace trillion::plan {
namespace {

// The published layout of DeepSeek-V3 §3.2 (no TP, PP16 DualPipe, EP64 over 8 nodes, ZeRO-1).
Layout deepseek_layout() {
  Layout l;
  l.tp = 1, l.pp = 16, l.cp = 1, l.ep = 64, l.dp = 128, l.zero = 1;
  l.schedule = schedule::ScheduleKind::kDualPipe;
  l.precision = Precision::kFp8;
  return l;
}

// One MoE layer of DeepSeek-V3, per token, norm-up recompute with the FP8 cache, written out
// tensor by tensor: what stays is the residuals, the norms' statistics, FlashAttention's lse, O
// in E5M6, MLA's latents before their norms and k_R, the router's scores, the dispatched tokens
// and the SwiGLU's inputs in FP8 with one fp32 scale per 128.
TEST(DeepSeekMemory, NormUpWithTheFp8CacheKeepsExactlyTheseBytes) {
  const ModelSpec& m = find_model("deepseek-v3");
  const double h = 7168, e = 2, fp8 = 1 + 4.0 / 128, e5m6 = 1.5 + 1.0 / 128;
  const double expected = e * h + 4                    // residual, RMSNorm 1's 1/rms
                          + 4 * 128                    // lse, 128 heads
                          + e5m6 * 128 * 128           // O: 128 heads x v_head_dim 128
                          + e * h + 4                  // residual after attention, 1/rms
                          + e * (1536 + 512 + 64)      // c_Q, c_KV before their norms, k_R
                          + 4 * 256                    // router scores
                          + fp8 * 8 * h                // the top-8 dispatched copies
                          + fp8 * 2 * (8 + 1) * 2048;  // gate and up of 8 routed + 1 shared
  const auto terms = block_terms(m, true, 4096, fp8_activation_cache());
  EXPECT_DOUBLE_EQ(layer_bytes_per_token(terms, 1, false, RecomputePolicy::kNormUp, e * h),
                   expected);
  // Norm-up drops exactly the norm outputs, MLA's latent norm outputs and the per-head Q, K, V
  // that its up-projections make (in 16 bits: bf16 cache, no recompute, the expert outputs
  // and SwiGLU products kept).
  const auto bf16 = block_terms(m, true, 4096);
  const double kept = layer_bytes_per_token(bf16, 1, false, RecomputePolicy::kNone, e * h);
  const double up = layer_bytes_per_token(bf16, 1, false, RecomputePolicy::kNormUp, e * h);
  EXPECT_DOUBLE_EQ(kept - up, e * (2 * h + (1536 + 512) + 128 * 192 + 128 * (192 + 128)));
  // The FP8 cache alone, no recompute: the expert outputs (e k h) and SwiGLU products leave.
  const double fp8_none = layer_bytes_per_token(terms, 1, false, RecomputePolicy::kNone, e * h);
  EXPECT_DOUBLE_EQ(fp8_none - expected,
                   fp8 * (2 * h + 1536 + 512) + e * 128 * 192 + e * 128 * (192 + 128));
}

// BF16 moments, an EMA on the GPU or in host memory: model states per rank in exact bytes,
// composing with each other and with the FP8 cache and norm-up.
TEST(DeepSeekMemory, MomentsAndEmaComposeInExactBytes) {
  const ModelSpec& m = find_model("deepseek-v3");
  Layout l = deepseek_layout();
  l.norm_up = true;
  l.moment_bytes = 2;
  const PipelineShape shape = pipeline_shape(m, l);
  const LocalParams p = params_of_rank(m, l, shape, 1);
  const double n_d = 128, n_e = 128 / 64;  // experts are replicated over dp x cp / ep = 2
  const auto states = [&](double per_param_sharded) {
    return p.dense * (2 + 4 + per_param_sharded / n_d) +
           p.expert * (2 + 4 + per_param_sharded / n_e);
  };
  const MemoryBreakdown plain = memory_per_rank(m, l, 4096, 120)[1];
  EXPECT_DOUBLE_EQ(plain.weights + plain.gradients + plain.optimizer, states(4 + 2 + 2));
  EXPECT_EQ(plain.host_ema, 0);
  l.ema = Ema::kGpu;
  const MemoryBreakdown gpu = memory_per_rank(m, l, 4096, 120)[1];
  EXPECT_DOUBLE_EQ(gpu.weights + gpu.gradients + gpu.optimizer, states(4 + 2 + 2 + 4));
  EXPECT_DOUBLE_EQ(gpu.activations, plain.activations);
  l.ema = Ema::kHost;
  const MemoryBreakdown host = memory_per_rank(m, l, 4096, 120)[1];
  EXPECT_DOUBLE_EQ(host.total(), plain.total());
  EXPECT_DOUBLE_EQ(host.host_ema, p.dense * 4 / n_d + p.expert * 4 / n_e);
}

// The command: `trillion plan --model deepseek-v3 --cluster h800 --gpus 2048 --tokens
// 14.8T --seq 4096 --precision fp8 --layout tp=1,pp=16,ep=64,dp=128,cp=1,zero=1,
// schedule=dualpipe` fits under 80 GB without full recomputation, with DeepSeek's own policy.
TEST(DeepSeekMemory, PublishedLayoutFitsWithoutFullRecompute) {
  PlanInputs in;
  in.model = find_model("deepseek-v3");
  in.gpu = find_gpu("h800");
  in.gpus = 2048;
  in.seq_len = 4096;
  in.tokens = 14.8e12;
  in.search.fixed = deepseek_layout();
  LayoutFields& f = in.search.fields;
  f.tp = f.pp = f.ep = f.dp = f.cp = f.zero = f.schedule = true;
  in.search.precisions = {Precision::kFp8};
  in.search.keep = 3;
  const Plan p = make_plan(in);
  const Candidate& best = p.best();
  EXPECT_EQ(best.layout.recompute_policy(), RecomputePolicy::kNormUp);
  EXPECT_TRUE(best.layout.fp8_activations());
  EXPECT_LE(best.step.memory.total(), 80e9);
  // Without the FP8 cache the same policy does not fit (the cache is what makes it fit).
  in.search.fixed.activation_cache = ActivationCache::kBf16;
  in.search.fixed.norm_up = true;
  f.act = f.recompute = true;
  EXPECT_THROW(make_plan(in), Error);
}

// Multi-token prediction (mtp_depth = D) at the published layout with an even partition: only
// the ranks holding the head (DualPipe's ranks 0 and p - 1 hold both ends) store more, as much per
// module (one MoE layer under the layout's policy plus the module's five [h] tensors and five
// statistics); its step costs more; the balanced partition moves layers off the head's stage.
TEST(DeepSeekMemory, MtpModulesCostTheHeadsRankOnly) {
  ModelSpec m = find_model("deepseek-v3");
  Layout l = deepseek_layout();
  l.norm_up = true;
  l.partition = Partition::kEven;
  std::vector<std::vector<MemoryBreakdown>> by_depth;
  for (int64_t d : {0, 1, 2}) {
    m.mtp_depth = d;
    by_depth.push_back(memory_per_rank(m, l, 4096, 120));
  }
  const double one = by_depth[1][0].activations - by_depth[0][0].activations;
  EXPECT_GT(one, 0);
  EXPECT_DOUBLE_EQ(by_depth[2][0].activations - by_depth[1][0].activations, one);
  EXPECT_DOUBLE_EQ(by_depth[1][15].activations - by_depth[0][15].activations, one);
  for (int r = 1; r + 1 < l.pp; ++r) {
    EXPECT_DOUBLE_EQ(by_depth[1][r].activations, by_depth[0][r].activations) << "rank " << r;
  }
  // Per micro-batch in flight: at least a layer's worth (norm-up keeps > 2 h per token).
  EXPECT_GT(one, 4096.0 * 2 * 7168 * 2);
  const Gpu gpu = find_gpu("h800");
  m.mtp_depth = 0;
  const double plain = model_step(m, gpu, l, 4096, 62914560.0).step;
  m.mtp_depth = 1;
  const double with = model_step(m, gpu, l, 4096, 62914560.0).step;
  EXPECT_GT(with, plain);
  l.partition = Partition::kBalanced;
  const PipelineShape shape = pipeline_shape(m, l);
  m.mtp_depth = 0;
  EXPECT_LT(shape.stage_layers.back(), pipeline_shape(m, l).stage_layers.back());
}

// The catalog's DeepSeek-V3 has its MTP module. At the published layout neither the even nor the
// balanced split fits 80 GB (the ranks holding the embedding, the head and the module, or the
// balanced split's 9-layer ranks, overflow); the fitted split gives the head's ranks fewer layers,
// never a stage more than the even split's longest, and every rank fits. The search finds it.
TEST(DeepSeekMemory, ItsMtpModuleFitsByASplitWithFewerLayersOnTheHeadsRanks) {
  const ModelSpec m = find_model("deepseek-v3");
  ASSERT_EQ(m.mtp_depth, 1);
  const Gpu gpu = find_gpu("h800");
  Layout l = deepseek_layout();
  l.norm_up = true;
  for (Partition part : {Partition::kEven, Partition::kBalanced}) {
    l.partition = part;
    EXPECT_GT(memory_per_gpu(m, l, 4096, 120, gpu.overhead_bytes).total(), gpu.hbm_bytes);
  }
  l.partition = Partition::kEven;
  const std::vector<int> counts =
      fitting_stage_layers(m, l, 4096, 120, gpu.overhead_bytes, gpu.hbm_bytes);
  ASSERT_EQ(counts.size(), 16u);
  int total = 0;
  for (int c : counts) {
    total += c;
    EXPECT_LE(c, 4);  // the even split's longest stage (61 = 13 x 4 + 3 x 3)
  }
  EXPECT_EQ(total, 61);
  for (int r = 1; r < 8; ++r) EXPECT_LT(counts[0] + counts[15], counts[r] + counts[15 - r]);
  Layout fit = l;
  fit.partition = Partition::kExplicit;
  fit.stage_layers = counts;
  for (const MemoryBreakdown& b : memory_per_rank(m, fit, 4096, 120, gpu.overhead_bytes))
    EXPECT_LE(b.total(), gpu.hbm_bytes) << "rank " << b.rank;

  PlanInputs in;
  in.model = m;
  in.gpu = gpu;
  in.gpus = 2048;
  in.seq_len = 4096;
  in.tokens = 14.8e12;
  in.search.fixed = deepseek_layout();
  LayoutFields& f = in.search.fields;
  f.tp = f.pp = f.ep = f.dp = f.cp = f.zero = f.schedule = true;
  in.search.precisions = {Precision::kFp8};
  const Plan p = make_plan(in);
  EXPECT_EQ(p.best().layout.partition, Partition::kExplicit);
  EXPECT_NE(p.best().layout.recompute, Recompute::kFull);
  EXPECT_LE(p.best().step.memory.total(), gpu.hbm_bytes);
}

// partition=3/4/4/2 names each stage's layers; the planner checks them against the model.
TEST(DeepSeekMemory, ExplicitPartitionsParsePrintAndAreChecked) {
  LayoutFields f;
  const Layout l = parse_layout("pp=4,partition=3/4/4/2", &f);
  EXPECT_TRUE(f.partition);
  EXPECT_EQ(l.partition, Partition::kExplicit);
  EXPECT_EQ(l.stage_layers, (std::vector<int>{3, 4, 4, 2}));
  EXPECT_NE(l.to_string().find("partition=3/4/4/2,"), std::string::npos);
  EXPECT_EQ(parse_layout(fixed_layout_text(l, f)).stage_layers, l.stage_layers);
  ModelSpec m = find_model("llama3-8b");
  m.n_layers = 13;
  EXPECT_EQ(pipeline_shape(m, l).stage_layers, l.stage_layers);
  m.n_layers = 12;  // 13 layers named
  EXPECT_THROW(pipeline_shape(m, l), Error);
  m.n_layers = 13;
  EXPECT_THROW(pipeline_shape(m, parse_layout("pp=4,partition=3/0/8/2")), Error);  // inner 0
  EXPECT_EQ(pipeline_shape(m, parse_layout("pp=4,partition=0/5/8/0")).stage_layers,
            (std::vector<int>{0, 5, 8, 0}));  // the ends may hold the embedding or head alone
  EXPECT_THROW(pipeline_shape(m, parse_layout("pp=2,partition=3/4/4/2")), Error);
  EXPECT_THROW(parse_layout("partition=3/x"), Error);
  EXPECT_THROW(parse_layout("partition=3//2"), Error);
}

}  // namespace
}  // namespace trillion::plan
