// Memory model: the ZeRO paper's 7.5B / 64-GPU example exactly, Korthikanti's Table 2 from the
// per-tensor derivation of the GPT block, our block's terms, and the pipeline in-flight counts
// shared with the schedule simulator.
#include "plan/memory.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "plan/activation_memory.h"
#include "plan/published_runs.h"
#include "schedule/generators.h"
#include "schedule/simulator.h"

namespace trillion::plan {
namespace {

// ZeRO 1910.02054 §3.1 / Figure 1: Psi = 7.5B, N_d = 64, K = 12.
TEST(Zero, ReproducesThePapersExample) {
  const double psi = 7.5e9;
  EXPECT_DOUBLE_EQ(zero_model_states(psi, 0, 64).total(), 120e9);
  EXPECT_DOUBLE_EQ(zero_model_states(psi, 1, 64).total(), 31.40625e9);
  EXPECT_DOUBLE_EQ(zero_model_states(psi, 2, 64).total(), 16.640625e9);
  EXPECT_DOUBLE_EQ(zero_model_states(psi, 3, 64).total(), 1.875e9);
  // As the paper prints them, to 0.1 GB: 120 / 31.4 / 16.6 / 1.9.
  const double printed[] = {120.0, 31.4, 16.6, 1.9};
  for (int stage = 0; stage <= 3; ++stage)
    EXPECT_DOUBLE_EQ(std::round(zero_model_states(psi, stage, 64).total() / 1e8) / 10,
                     printed[stage]);
  // Stage 1 shards only the optimizer, stage 2 also gradients, stage 3 also parameters.
  const ModelStates s2 = zero_model_states(psi, 2, 64);
  EXPECT_DOUBLE_EQ(s2.parameters, 2 * psi);
  EXPECT_DOUBLE_EQ(s2.gradients, 2 * psi / 64);
  EXPECT_DOUBLE_EQ(s2.optimizer, 12 * psi / 64);
}

// Summing Korthikanti §4.1's stored tensors reproduces every row of Table 2.
TEST(Activations, GptBlockTermsReproduceKorthikantiTable2) {
  for (double s : {2048.0, 4096.0})
    for (double h : {4096.0, 12288.0})
      for (double a : {32.0, 96.0})
        for (int t : {1, 2, 8}) {
          const auto terms = gpt_block_terms(s, h, a);
          const double b = 1, sbh = s * b * h;
          auto ours = [&](bool sp, Recompute r) {
            return s * b * layer_bytes_per_token(terms, t, sp, r, 2 * h);
          };
          EXPECT_DOUBLE_EQ(ours(false, Recompute::kNone),
                           sbh * (10 + 24.0 / t + 5 * a * s / (h * t)));
          EXPECT_DOUBLE_EQ(ours(true, Recompute::kNone), sbh * (34.0 / t + 5 * a * s / (h * t)));
          EXPECT_DOUBLE_EQ(ours(false, Recompute::kSelective), sbh * (10 + 24.0 / t));
          EXPECT_DOUBLE_EQ(ours(true, Recompute::kSelective), 34 * sbh / t);
          EXPECT_DOUBLE_EQ(ours(false, Recompute::kFull), 2 * sbh);
          for (bool sp : {false, true})
            for (Recompute r : {Recompute::kNone, Recompute::kSelective})
              EXPECT_DOUBLE_EQ(ours(sp, r), korthikanti_layer_bytes(s, b, h, a, t, sp, r));
        }
  // No parallelism: sbh(34 + 5as/h).
  EXPECT_DOUBLE_EQ(korthikanti_layer_bytes(2048, 1, 4096, 32, 1, false, Recompute::kNone),
                   2048.0 * 4096 * (34 + 5 * 32 * 2048.0 / 4096));
}

// The general block model, given Korthikanti's GPT block (LayerNorm, GELU 4h, MHA, materialised
// softmax, dropout, 16-bit; Table 2 leaves out the norms' fp32 statistics), is Table 2: every
// row, with and without SP, for every recompute policy.
TEST(Activations, GeneralBlockModelHasKorthikantiTable2AsASpecialCase) {
  const ActivationOptions table2{2.0, 0.0};
  for (int64_t h : {2304, 12288})
    for (int64_t a : {24, 96})
      for (double s : {2048.0, 8192.0}) {
        const ModelSpec m = megatron_gpt("gpt", h, a, 4);
        const auto terms = block_terms(m, false, s, table2);
        for (int t : {1, 2, 8})
          for (bool sp : {false, true})
            for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
              if (r == Recompute::kFull && sp) continue;  // Table 2's full row is without SP
              EXPECT_DOUBLE_EQ(s * layer_bytes_per_token(terms, t, sp, r, 2.0 * h),
                               korthikanti_layer_bytes(s, 1, h, a, t, sp, r))
                  << "h=" << h << " a=" << a << " t=" << t << " sp=" << sp << " "
                  << recompute_name(r);
            }
      }
  // Without dropout the softmax mask and dropout output go: 5as becomes 2as.
  ModelSpec m = megatron_gpt("gpt", 4096, 32, 4);
  m.dropout = 0;
  EXPECT_DOUBLE_EQ(2048 * layer_bytes_per_token(block_terms(m, false, 2048, table2), 1, false,
                                                Recompute::kNone, 2 * 4096.0),
                   2048.0 * 4096 * (32 + 2 * 32 * 2048.0 / 4096));
  // FlashAttention instead of the softmax: no s^2 term, a 4-byte logsumexp per head.
  m.attention_kernel = AttentionKernel::kFlash;
  EXPECT_DOUBLE_EQ(layer_bytes_per_token(block_terms(m, false, 2048, table2), 1, false,
                                         Recompute::kNone, 2 * 4096.0),
                   32 * 4096.0 + 4 * 32);
  // LayerNorm keeps two statistics per norm, RMSNorm one.
  const ActivationOptions stats{2.0, 4.0};
  EXPECT_DOUBLE_EQ(layer_bytes_per_token(block_terms(m, false, 2048, stats), 1, false,
                                         Recompute::kNone, 2 * 4096.0) -
                       layer_bytes_per_token(block_terms(m, false, 2048, table2), 1, false,
                                             Recompute::kNone, 2 * 4096.0),
                   16);
}

// Our block (RMSNorm, GQA, RoPE, FlashAttention, SwiGLU), per token and layer:
// none e(6h + 2 KV HD + 3F) + 4 NH + 8; selective (attention core and SwiGLU product
// recomputed) e(5h + 2 KV HD + 2F) + 8; full e h (the layer input). Everything divides by t
// under TP + SP.
TEST(Activations, OurBlockTerms) {
  const ModelSpec& m = find_model("llama3-405b");
  const double h = 16384, kv = 8, hd = 128, f = 53248, nh = 128;
  for (double e : {4.0, 2.0, 1.0}) {
    const auto terms = block_terms(m, false, 8192, {e, 4.0});
    EXPECT_DOUBLE_EQ(layer_bytes_per_token(terms, 1, false, Recompute::kNone, e * h),
                     e * (6 * h + 2 * kv * hd + 3 * f) + 4 * nh + 8);
    EXPECT_DOUBLE_EQ(layer_bytes_per_token(terms, 1, false, Recompute::kSelective, e * h),
                     e * (5 * h + 2 * kv * hd + 2 * f) + 8);
    EXPECT_DOUBLE_EQ(layer_bytes_per_token(terms, 8, true, Recompute::kNone, e * h),
                     (e * (6 * h + 2 * kv * hd + 3 * f) + 4 * nh + 8) / 8);
    EXPECT_DOUBLE_EQ(layer_bytes_per_token(terms, 8, true, Recompute::kFull, e * h), e * h / 8);
    // Without SP the four norm/residual tensors and 1/rms stay whole on every TP rank.
    EXPECT_DOUBLE_EQ(layer_bytes_per_token(terms, 8, false, Recompute::kNone, e * h),
                     (e * (2 * h + 2 * kv * hd + 3 * f) + 4 * nh) / 8 + e * 4 * h + 8);
  }
  // A MoE layer stores each token's top-k dispatched copies and expert activations.
  const ModelSpec& ds = find_model("deepseek-v3");
  EXPECT_GT(
      layer_bytes_per_token(block_terms(ds, true, 4096), 1, false, Recompute::kNone, 2 * 7168),
      layer_bytes_per_token(block_terms(ds, false, 4096), 1, false, Recompute::kNone, 2 * 7168));
}

ModelSpec dense_spec(int64_t V, int64_t C, int64_t L, int64_t NH, int64_t KV, int64_t HD, int64_t F,
                     bool tied) {
  ModelSpec m;
  m.name = "test";
  m.vocab = V, m.d_model = C, m.n_layers = L, m.n_heads = NH, m.n_kv_heads = KV;
  m.head_dim = HD, m.ffn_hidden = F, m.tied_embeddings = tied, m.default_seq = 128;
  return m;
}

// One cost model: per layer, the planner's terms equal what the engine allocates
// (plan/activation_memory.h, checked by the engine's tests against its measured buffers) for
// every policy, with fp32 elements and statistics and tiled attention (no s^2 term).
TEST(Activations, OurBlockTermsEqualTheEnginesAllocation) {
  for (const ModelSpec& spec :
       {dense_spec(1000, 64, 3, 4, 2, 16, 160, false), dense_spec(512, 96, 2, 6, 6, 16, 256, true),
        find_model("llama3-8b")}) {
    const int64_t batch = 3, seq = 128, tokens = batch * seq;
    for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
      ActivationPolicy policy;
      policy.recompute = r;
      ModelSpec one = spec, two = spec;
      one.n_layers = 1;
      two.n_layers = 2;
      const double engine_layer =
          static_cast<double>(engine_activation_bytes(two, batch, seq, policy, 4, 4).stored -
                              engine_activation_bytes(one, batch, seq, policy, 4, 4).stored);
      const double ours = tokens * layer_bytes_per_token(block_terms(spec, false, seq, {4.0, 4.0}),
                                                         1, false, r, 4.0 * spec.d_model);
      EXPECT_DOUBLE_EQ(ours, engine_layer) << recompute_name(r) << " C=" << spec.d_model;
    }
  }
}

// The same under tensor parallelism: per layer, the planner's terms with tp in {2, 4} and SP off
// or on equal the engine's formula with TensorSplit (which the engine's runs match on every rank,
// tests/parallel/tensor_train_test), once the planner keeps the gathered norm outputs under SP
// as the engine does; without that option SP's terms are Megatron's, 2 h per token lower.
TEST(Activations, OurBlockTermsEqualTheEnginesAllocationUnderTensorParallelism) {
  const ModelSpec spec = dense_spec(1000, 64, 3, 4, 4, 16, 160, false);
  const int64_t batch = 2, seq = 128, tokens = batch * seq;
  for (int t : {2, 4}) {
    for (bool sp : {false, true}) {
      for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
        ActivationPolicy policy;
        policy.recompute = r;
        ModelSpec one = spec, two = spec;
        one.n_layers = 1;
        two.n_layers = 2;
        const TensorSplit split{t, sp};
        const double engine_layer = static_cast<double>(
            engine_activation_bytes(two, batch, seq, policy, 4, 4, {}, 1, split).stored -
            engine_activation_bytes(one, batch, seq, policy, 4, 4, {}, 1, split).stored);
        ActivationOptions engine_layout{4.0, 4.0};
        engine_layout.keeps_sp_gathered_norms = true;
        auto planner = [&](const ActivationOptions& o) {
          return tokens * layer_bytes_per_token(block_terms(spec, false, seq, o), t, sp, r,
                                                4.0 * spec.d_model);
        };
        EXPECT_DOUBLE_EQ(planner(engine_layout), engine_layer)
            << "tp " << t << " sp " << sp << " " << recompute_name(r);
        const double megatron_gap = sp && r != Recompute::kFull ? 2.0 * 4 * spec.d_model : 0.0;
        EXPECT_DOUBLE_EQ(planner({4.0, 4.0}), engine_layer - tokens * megatron_gap)
            << "tp " << t << " sp " << sp << " " << recompute_name(r);
      }
    }
  }
}

// The whole model on one stage: the planner's activations (layers + the head's tensors) equal
// the engine's stored bytes for every policy and micro-batch size, fp32 as the engine runs.
TEST(Activations, WholeModelEqualsTheEnginesAllocation) {
  for (const ModelSpec& spec :
       {dense_spec(1000, 64, 3, 4, 2, 16, 160, false), find_model("llama3-8b")})
    for (int mb : {1, 3})
      for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
        Layout l;
        l.recompute = r, l.micro_batch = mb;
        ActivationPolicy policy;
        policy.recompute = r;
        const MemoryBreakdown ours = memory_per_gpu(spec, l, 128, 4, 0, {4.0, 4.0});
        EXPECT_DOUBLE_EQ(
            ours.activations / 1.0,
            static_cast<double>(engine_activation_bytes(spec, mb, 128, policy, 4, 4).stored))
            << spec.name << " " << recompute_name(r) << " mb=" << mb;
      }
}

// The memory model's in-flight micro-batches are the schedule simulator's peak.
TEST(Activations, InflightMatchesTheSimulator) {
  using schedule::ScheduleKind;
  for (int p : {2, 4, 8, 16}) {
    const int m = 4 * p;
    for (auto [kind, v] :
         {std::pair{ScheduleKind::k1F1B, 1}, std::pair{ScheduleKind::kZbH1, 1},
          std::pair{ScheduleKind::kInterleaved, 2}, std::pair{ScheduleKind::kInterleaved, 4},
          std::pair{ScheduleKind::kDualPipe, 2}, std::pair{ScheduleKind::kGPipe, 1}}) {
      Layout l;
      l.pp = p, l.schedule = kind, l.chunks = v;
      const auto peak =
          schedule::simulate(schedule::generate_schedule(kind, p, m, v), {}).peak_inflight;
      EXPECT_NEAR(inflight_microbatches(l, m), *std::max_element(peak.begin(), peak.end()), 1e-12)
          << schedule::schedule_kind_name(kind) << " p=" << p;
    }
  }
}

TEST(Memory, ShardingShrinksWhatItShards) {
  const ModelSpec& m = find_model("moe-2t");
  Layout l;
  l.tp = 8, l.pp = 8, l.dp = 256, l.ep = 8, l.schedule = schedule::ScheduleKind::k1F1B;
  // Rank 3 holds 12 MoE layers (the dense ones and the embedding sit on rank 0).
  const MemoryBreakdown a = memory_per_rank(m, l, 4096, 16)[3];
  l.ep = 64;
  const MemoryBreakdown b = memory_per_rank(m, l, 4096, 16)[3];
  EXPECT_LT(b.weights, a.weights / 4);  // experts dominate and shard 8x more
  EXPECT_DOUBLE_EQ(a.activations, b.activations);
  l.recompute = Recompute::kFull;
  EXPECT_LT(memory_per_rank(m, l, 4096, 16)[3].activations, b.activations / 10);
  l.zero = 3;
  // Experts shard over dp/ep = 4 replicas, the rest over 256.
  EXPECT_LT(memory_per_rank(m, l, 4096, 16)[3].weights, b.weights / 3.5);
  // fp32 gradients (Megatron's main_grad) are 18 bytes per parameter with Adam, bf16 ones 16.
  Layout z;
  z.zero = 0;
  const ModelSpec& small = find_model("llama3-8b");
  const MemoryBreakdown fp32 = memory_per_gpu(small, z, 8192, 1);
  z.grad_bytes = 2;
  const MemoryBreakdown bf16 = memory_per_gpu(small, z, 8192, 1);
  const double params = static_cast<double>(count_model(small).total);
  EXPECT_DOUBLE_EQ(fp32.weights + fp32.gradients + fp32.optimizer, 18 * params);
  EXPECT_DOUBLE_EQ(bf16.weights + bf16.gradients + bf16.optimizer, 16 * params);
  // DeepSeek-V3's bf16 Adam moments: 2 + 4 + 4 + 2 + 2 = 14.
  z.grad_bytes = 4, z.moment_bytes = 2;
  const MemoryBreakdown ds = memory_per_gpu(small, z, 8192, 1);
  EXPECT_DOUBLE_EQ(ds.weights + ds.gradients + ds.optimizer, 14 * params);
}

// Every rank's memory comes from the stages it holds and the schedule's slots: under 1F1B rank r
// keeps p - r micro-batches; DualPipe ranks hold two copies' parameters.
TEST(Memory, PerRankFromThePartitionAndTheSchedule) {
  const ModelSpec& m = find_model("llama3-8b");  // 32 layers
  Layout l;
  l.pp = 4, l.schedule = schedule::ScheduleKind::k1F1B, l.recompute = Recompute::kFull;
  const auto ranks = memory_per_rank(m, l, 8192, 8);
  ASSERT_EQ(ranks.size(), 4u);
  // Full recompute keeps each layer's input: 8 layers x 4 - r slots x 8192 x 4096 x 2 bytes,
  // plus the head's final-norm tensors on the last rank.
  for (int r = 0; r < 3; ++r)
    EXPECT_DOUBLE_EQ(ranks[r].activations, 8.0 * (4 - r) * 8192 * 4096 * 2) << r;
  EXPECT_DOUBLE_EQ(ranks[3].activations, (8 * 8192.0 * 4096 * 2 + 8192 * (2 * 4096 * 2 + 12)));
  l.schedule = schedule::ScheduleKind::kDualPipe;
  const auto dual = memory_per_rank(m, l, 8192, 8);
  const auto single = memory_per_rank(m, Layout{.pp = 4, .recompute = Recompute::kFull}, 8192, 8);
  EXPECT_GT(dual[1].weights, 1.9 * single[1].weights);  // stage 1 and stage 2: two copies
}

// The even partition is the engine's; balanced weighs the embedding (one layer) and the head
// (its matmul work): Llama 3 405B's 126 layers on 16 stages become 7, 8 x 14, 7.
TEST(Stages, EvenIsTheEnginesAndBalancedWeighsTheEnds) {
  for (int64_t L : {8, 31, 126})
    for (int S : {1, 2, 5, 8})
      EXPECT_EQ(stage_layer_counts(partition_stages(L, S, StageWeights{})),
                stage_layer_counts(partition_stages(L, S)));
  const std::vector<int> balanced = stage_layer_counts(
      partition_stages(126, 16, balanced_stage_weights(find_model("llama3-405b"))));
  std::vector<int> expected(16, 8);
  expected.front() = expected.back() = 7;
  EXPECT_EQ(balanced, expected);
  const std::vector<int> even = stage_layer_counts(partition_stages(126, 16));
  EXPECT_EQ(even.front(), 8);
  EXPECT_EQ(even.back(), 7);
  EXPECT_THROW(partition_stages(4, 5), Error);
  // The planner's pipeline shape reads the placement from the schedule: interleaved stage s on
  // rank s mod p; no stage without a layer.
  Layout l;
  l.pp = 4, l.schedule = schedule::ScheduleKind::kInterleaved, l.chunks = 2;
  const PipelineShape shape = pipeline_shape(find_model("llama3-8b"), l);
  EXPECT_EQ(shape.stages.size(), 8u);
  EXPECT_EQ(shape.rank_stages[1], (std::vector<int>{1, 5}));
  EXPECT_EQ(shape.max_rank_layers(), 8);
  l.chunks = 9;  // 36 stages for 32 layers
  EXPECT_THROW(pipeline_shape(find_model("llama3-8b"), l), Error);
}

// Llama 3 405B's pipeline (2407.21783 §3.3.2): 126 layers, the embedding and the head on 16 ranks
// x 8 chunks = 128 stages of one unit each; "the first model chunk on the first stage has only
// the embedding, and the last model chunk on the last stage has only output projection and loss".
TEST(Stages, EmbeddingAndHeadMayHoldAStageAlone) {
  const ModelSpec& m = find_model("llama3-405b");
  const StageWeights w = balanced_stage_weights(m);
  EXPECT_EQ(max_stages(126, w), 128);
  EXPECT_EQ(max_pipeline_stages(m, Partition::kEven), 126);
  EXPECT_EQ(max_pipeline_stages(m, Partition::kBalanced), 128);
  const std::vector<StageUnits> stages = partition_stages(126, 128, w);
  ASSERT_EQ(stages.size(), 128u);
  EXPECT_EQ(stages.front().first_unit, 0);
  EXPECT_EQ(stages.front().last_unit, 0);  // the embedding alone
  EXPECT_EQ(stages.back().first_unit, 127);
  EXPECT_EQ(stages.back().last_unit, 127);  // the head alone
  std::vector<int> expected(128, 1);
  expected.front() = expected.back() = 0;
  EXPECT_EQ(stage_layer_counts(stages), expected);
  // 127 stages: one end gives up its unit of its own (the embedding's weight 1 exceeds the
  // head's 2.1B / 3.2B parameters' worth), so only the first stage is alone.
  const std::vector<int> s127 = stage_layer_counts(partition_stages(126, 127, w));
  EXPECT_EQ(s127.front(), 0);
  EXPECT_EQ(s127.back(), 1);
  EXPECT_THROW(partition_stages(126, 129, w), Error);
  EXPECT_THROW(partition_stages(126, 127), Error);  // the even split: a layer per stage
  // Zero weights never empty a stage; one stage holds everything whatever the weights.
  EXPECT_EQ(stage_layer_counts(partition_stages(3, 1, w)), std::vector<int>{3});
  // The planner's shape: rank 0 holds stages 0, 16, ..., 112 (7 layers), rank 1 eight layers.
  Layout l;
  l.pp = 16, l.schedule = schedule::ScheduleKind::kInterleaved, l.chunks = 8;
  l.partition = Partition::kBalanced;
  const PipelineShape shape = pipeline_shape(m, l);
  EXPECT_EQ(shape.rank_stages[0][1], 16);
  EXPECT_EQ(shape.max_rank_layers(), 8);
  int rank0 = 0;
  for (int st : shape.rank_stages[0]) rank0 += shape.stage_layers[st];
  EXPECT_EQ(rank0, 7);
  l.partition = Partition::kEven;
  EXPECT_THROW(pipeline_shape(m, l), Error);
}

// The weighted partition against brute force: for every L <= 24 and S <= L + 2 it covers the
// units once in order, gives each stage its fewest layers (1; 0 only for a weighed end stage)
// and its costliest stage (layers + weight) is the optimum over all contiguous splits.
TEST(Stages, WeightedPartitionIsOptimalAgainstBruteForce) {
  for (const StageWeights w : {StageWeights{1.0, 0.66}, StageWeights{0.5, 2.3}, StageWeights{}}) {
    for (int64_t L = 1; L <= 24; ++L) {
      for (int S = 1; S <= max_stages(L, w); ++S) {
        const std::vector<StageUnits> st = partition_stages(L, S, w);
        ASSERT_EQ(static_cast<int>(st.size()), S);
        const std::vector<int> counts = stage_layer_counts(st);
        auto weight = [&](int s) {
          return (s == 0 ? w.embedding : 0.0) + (s == S - 1 ? w.head : 0.0);
        };
        auto fewest = [&](int s) {
          return S > 1 && ((s == 0 && w.embedding > 0) || (s == S - 1 && w.head > 0)) ? 0 : 1;
        };
        int next = 0, total = 0;
        double worst = 0;
        for (int s = 0; s < S; ++s) {
          EXPECT_EQ(st[s].first_unit, next) << L << " " << S;
          next = st[s].last_unit + 1;
          EXPECT_GE(counts[s], fewest(s)) << L << " " << S << " stage " << s;
          total += counts[s];
          worst = std::max(worst, counts[s] + weight(s));
        }
        EXPECT_EQ(next, L + 2);
        EXPECT_EQ(total, L);
        // best[s][n]: the least possible costliest stage of stages 0..s holding n layers.
        std::vector<std::vector<double>> best(S, std::vector<double>(L + 1, INFINITY));
        for (int n = fewest(0); n <= L; ++n) best[0][n] = n + weight(0);
        for (int s = 1; s < S; ++s)
          for (int n = 0; n <= L; ++n)
            for (int k = fewest(s); k <= n; ++k)
              best[s][n] = std::min(best[s][n], std::max(best[s - 1][n - k], k + weight(s)));
        EXPECT_NEAR(worst, best[S - 1][L], 1e-9) << L << " layers on " << S << " stages";
      }
    }
  }
}

// alloc=live: a caching allocator's peak is the largest sum over a rank's chunks at one moment of
// the schedule; the engine's slots hold each chunk's own peak for the whole step. Equal with one
// chunk per rank; with interleaved chunks of equal bytes the live peak is the simulator's
// peak_inflight (in stages) x the stage's bytes.
TEST(Memory, LiveAllocationIsTheSchedulesPeak) {
  const ModelSpec& m = find_model("llama3-8b");  // 32 layers: 8 stages of 4 under pp 4 x v 2
  const int p = 4, mb = 8;
  Layout l;
  l.pp = p, l.recompute = Recompute::kFull, l.schedule = schedule::ScheduleKind::k1F1B;
  Layout live = l;
  live.allocation = Allocation::kLive;
  const auto a = memory_per_rank(m, l, 8192, mb), b = memory_per_rank(m, live, 8192, mb);
  for (int r = 0; r < p; ++r) EXPECT_DOUBLE_EQ(a[r].activations, b[r].activations) << r;

  l.schedule = live.schedule = schedule::ScheduleKind::kInterleaved;
  l.chunks = live.chunks = 2;
  const auto slots = memory_per_rank(m, l, 8192, mb), peak = memory_per_rank(m, live, 8192, mb);
  const auto sim = schedule::simulate(schedule::generate_schedule(l.schedule, p, mb, 2), {});
  const auto& per_chunk = schedule_slots(l, mb);
  const double chunk = 4.0 * 8192 * 4096 * 2;  // 4 layers' inputs (full recompute), one mb
  for (int r = 0; r < p - 1; ++r) {            // the last rank also holds the head's tensors
    EXPECT_DOUBLE_EQ(slots[r].activations, chunk * (per_chunk[r][0] + per_chunk[r][1])) << r;
    EXPECT_NEAR(peak[r].activations, chunk * 2 * sim.peak_inflight[r], 1e-6 * chunk) << r;
    EXPECT_LE(peak[r].activations, slots[r].activations) << r;
  }
  // Rank 0: slots for 8 + 4 chunk micro-batches, but at most 11 live at once, Megatron's
  // warm-up of 2 (p - 1) + (v - 1) p = 10 forwards plus the first steady-state one.
  EXPECT_DOUBLE_EQ(slots[0].activations, 12 * chunk);
  EXPECT_DOUBLE_EQ(peak[0].activations, 11 * chunk);
}

}  // namespace
}  // namespace trillion::plan
