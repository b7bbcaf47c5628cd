// Model catalog and counts: the parameter table (shared with the engine) equals an independent
// closed form for every catalog model and carries shards, init and units; the catalog's totals
// match the published parameter counts; Chinchilla's Table 3; layouts.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "plan/hardware.h"
#include "plan/layout.h"
#include "plan/model_spec.h"
#include "plan/parameter_table.h"

namespace trillion::plan {
namespace {

// An independent closed form of the counts (DeepSeek-V2 §2.1 for MLA, V3 §2.1.2 for MoE),
// written out term by term, against the planner's counts, which sum the parameter table the
// engine allocates: equal for every catalog model (dense, GELU, MoE, MLA).
ModelCounts closed_form(const ModelSpec& m) {
  ModelCounts c;
  const int64_t C = m.d_model, NH = m.n_heads, F = m.ffn_hidden;
  const bool ln = m.norm == NormKind::kLayerNorm, swiglu = m.mlp == MlpKind::kSwiGlu;
  int64_t attention_bias = 0, mlp_bias = 0;
  if (m.is_mla()) {
    const int64_t q = m.q_lora_rank > 0
                          ? C * m.q_lora_rank + m.q_lora_rank * NH * m.qk_dim() + m.q_lora_rank
                          : C * NH * m.qk_dim();
    const int64_t kv = C * (m.kv_lora_rank + m.qk_rope_dim) + m.kv_lora_rank +
                       m.kv_lora_rank * NH * (m.qk_nope_dim + m.v_head_dim);
    c.attention = q + kv + NH * m.v_head_dim * C;
  } else {
    c.attention = C * NH * m.head_dim + 2 * C * m.n_kv_heads * m.head_dim + NH * m.head_dim * C;
    // q, k, v biases split with their columns, the output bias whole.
    if (m.linear_biases) attention_bias = NH * m.head_dim + 2 * m.n_kv_heads * m.head_dim + C;
  }
  if (m.linear_biases) mlp_bias = (swiglu ? 2 * F : F) + C;
  c.attention += attention_bias;
  const int64_t norm = ln ? 2 * C : C;  // LayerNorm: weight + bias
  c.norms = 2 * norm;
  c.dense_mlp = m.mlp_matrices() * C * F + mlp_bias;
  c.expert = m.is_moe() ? 3 * C * m.expert_ffn : 0;
  const int64_t bias = m.is_moe() && m.router_bias ? m.n_routed_experts : 0;
  c.router = m.is_moe() ? C * m.n_routed_experts + bias : 0;
  c.embedding = m.vocab * C + (m.position == PositionKind::kLearned ? m.default_seq * C : 0);
  c.head = (m.tied_embeddings ? 0 : m.vocab * C) + norm;
  const int64_t per_dense = c.attention + c.norms + c.dense_mlp;
  const int64_t per_moe_shared =
      c.attention + c.norms + c.router + m.n_shared_experts * 3 * C * m.expert_ffn;
  c.routed_total = m.moe_layers() * m.n_routed_experts * c.expert;
  c.dense_total =
      m.dense_layers() * per_dense + m.moe_layers() * per_moe_shared + c.embedding + c.head;
  c.total = c.dense_total + c.routed_total;
  c.activated = c.dense_total + m.moe_layers() * m.top_k * c.expert;
  // Weights that multiply: not the embedding lookup, norms or biases (routing bias included);
  // the tied head does.
  c.matmul_active = c.activated - c.embedding - m.n_layers * (c.norms + attention_bias) -
                    m.dense_layers() * mlp_bias - norm - m.moe_layers() * bias +
                    m.vocab * C * (m.tied_embeddings ? 1 : 0);
  const int64_t mla_norms =
      m.is_mla() ? m.kv_lora_rank + (m.q_lora_rank > 0 ? m.q_lora_rank : 0) : 0;
  c.matmul_active -= m.n_layers * mla_norms;
  // Each MTP module (DeepSeek-V3 §2.2): one layer like the last (MoE in a MoE model), eh_proj
  // [C, 2C] and three norms; its tokens pass the shared head once more.
  if (m.mtp_depth > 0) {
    const int64_t D = m.mtp_depth;
    const bool moe = m.is_moe();
    const int64_t layer = moe ? per_moe_shared + m.n_routed_experts * c.expert : per_dense;
    const int64_t active = moe ? per_moe_shared + m.top_k * c.expert : per_dense;
    const int64_t extra = 2 * C * C + 3 * norm;
    c.total += D * (layer + extra);
    c.routed_total += D * (moe ? m.n_routed_experts * c.expert : 0);
    c.activated += D * (active + extra);
    c.matmul_active += D * (active - c.norms - attention_bias - (moe ? bias : mlp_bias) -
                            mla_norms + 2 * C * C + m.vocab * C);
  }
  return c;
}

TEST(Models, EveryCatalogModelsTableEqualsTheClosedForm) {
  for (const ModelSpec& m : model_catalog()) {
    const ModelCounts c = count_model(m), f = closed_form(m);
    EXPECT_EQ(c.total, f.total) << m.name;
    EXPECT_EQ(c.total, parameter_table(m).total_elements()) << m.name;
    EXPECT_EQ(c.activated, f.activated) << m.name;
    EXPECT_EQ(c.matmul_active, f.matmul_active) << m.name;
    EXPECT_EQ(c.attention, f.attention) << m.name;
    EXPECT_EQ(c.dense_mlp, f.dense_mlp) << m.name;
    EXPECT_EQ(c.expert, f.expert) << m.name;
    EXPECT_EQ(c.router, f.router) << m.name;
    EXPECT_EQ(c.embedding, f.embedding) << m.name;
    EXPECT_EQ(c.head, f.head) << m.name;
    EXPECT_EQ(c.routed_total, f.routed_total) << m.name;
    for (int64_t seq : {2048, 8192, 131072}) {
      const double attention =
          6.0 * (m.n_layers + m.mtp_depth) * m.n_heads * (m.qk_dim() + m.v_dim()) * seq;
      EXPECT_DOUBLE_EQ(model_flops_per_token(m, seq, AttentionFlops::kFullSquare),
                       6.0 * f.matmul_active + attention)
          << m.name;
      EXPECT_DOUBLE_EQ(model_flops_per_token(m, seq, AttentionFlops::kCausal),
                       6.0 * f.matmul_active + attention / 2)
          << m.name;
    }
  }
}

TEST(Models, TableSpecsCarryShardInitAndUnit) {
  const ModelSpec& m = find_model("deepseek-v3");
  const TensorTable t = parameter_table(m);
  const TensorSpec& experts = t.spec(t.index("layers.5.moe.experts.w_down"));
  EXPECT_EQ(experts.shard.group, ShardGroup::ep);
  EXPECT_EQ(experts.shard.dim, 0);
  EXPECT_EQ(experts.unit, layer_unit(5));
  EXPECT_EQ(experts.role, TensorRole::routed_expert);
  EXPECT_DOUBLE_EQ(experts.init.std, m.init_std / std::sqrt(2.0 * 61));  // residual output
  const TensorSpec& wo = t.spec(t.index("layers.0.attn.wo"));
  EXPECT_EQ(wo.shard.group, ShardGroup::tp);
  EXPECT_EQ(wo.shard.dim, 1);  // row-parallel
  const TensorSpec& norm = t.spec(t.index("layers.0.attn.kv_norm"));
  EXPECT_EQ(norm.init.kind, InitKind::ones);
  EXPECT_FALSE(norm.weight_decay);
  EXPECT_EQ(t.spec(t.index("final_norm")).unit, head_unit(m));
  EXPECT_FALSE(t.contains("layers.2.moe.router"));  // the first 3 layers are dense
  EXPECT_TRUE(t.contains("layers.3.moe.router"));
}

TEST(Models, LocalTableCutsShardsAndKeepsUnits) {
  const ModelSpec& m = find_model("llama3-8b");
  const TensorTable t = parameter_table(m);
  const ShardCoord tp4{4, 1, 1, 0};
  const TensorTable local = t.local([](int unit) { return unit >= 1 && unit <= 4; }, tp4);
  EXPECT_EQ(local.spec(0).name, "layers.0.attn_norm");
  const TensorSpec& wq = local.spec(local.index("layers.0.attn.wq"));
  EXPECT_EQ(wq.shape, (std::vector<int64_t>{4096 / 4, 4096}));
  const TensorSpec& wo = local.spec(local.index("layers.0.attn.wo"));
  EXPECT_EQ(wo.shape, (std::vector<int64_t>{4096, 4096 / 4}));
  // Element (row 2, column 3) of rank 1's wo shard is element (2, 1024 + 3) of the whole tensor.
  EXPECT_EQ(global_element_index(wo, tp4, 2 * 1024 + 3), 2 * 4096 + 1024 + 3);
  EXPECT_EQ(global_element_index(wq, tp4, 5 * 4096 + 7), (1024 + 5) * 4096 + 7);
  const ShardCoord tp3{3, 0, 1, 0};
  EXPECT_THROW(t.local([](int) { return true; }, tp3), Error);  // 32 heads do not split in 3
}

TEST(Models, CatalogMatchesPublishedSizes) {
  auto billions = [](const char* name) { return count_model(find_model(name)).total / 1e9; };
  EXPECT_NEAR(billions("llama3-8b"), 8.0, 0.1);
  EXPECT_NEAR(billions("llama3-70b"), 70.6, 0.1);
  EXPECT_NEAR(billions("llama3-405b"), 405.9, 0.1);                                // "405B"
  EXPECT_NEAR(billions("gpt3-175b"), 174.6, 0.1);                                  // "175B"
  // DeepSeek-V3: the main model's 671B total and 37B activated (§4.2), and its MTP module apart
  // (11.6B of its own; the released checkpoint's "14B" adds copies of the shared embedding and
  // head, 2 x 0.93B).
  const ModelCounts ds = count_model(find_model("deepseek-v3"));
  EXPECT_NEAR((ds.total - ds.mtp) / 1e9, 671.0, 1.0);
  EXPECT_NEAR((ds.mtp + 2 * ds.embedding) / 1e9, 14.0, 0.6);
  ModelSpec main_only = find_model("deepseek-v3");
  main_only.mtp_depth = 0;
  EXPECT_NEAR(count_model(main_only).activated / 1e9, 37.5, 0.6);
  EXPECT_NEAR(billions("moe-2t"), 1994, 1);
  EXPECT_NEAR(count_model(find_model("moe-2t")).activated / 1e9, 87.4, 0.1);
  // Causal attention counts half of PaLM's 12 L h s.
  const ModelSpec& m = find_model("llama3-405b");
  EXPECT_DOUBLE_EQ(model_flops_per_token(m, 8192, AttentionFlops::kFullSquare) -
                       model_flops_per_token(m, 8192, AttentionFlops::kCausal),
                   6.0 * 126 * 16384 * 8192);
  EXPECT_THROW(find_model("llama5"), Error);
  EXPECT_THROW(require_engine_block(find_model("deepseek-v3")), Error);
}

TEST(Models, ChinchillaTable3) {
  EXPECT_NEAR(chinchilla_tokens(1e9) / 20.2e9, 1.0, 0.01);
  EXPECT_NEAR(chinchilla_tokens(1e12) / 21.2e12, 1.0, 0.01);
  EXPECT_NEAR(chinchilla_tokens(2e12) / 42.4e12, 1.0, 0.01);
}

TEST(Hardware, CatalogHasTheNamedClusters) {
  EXPECT_DOUBLE_EQ(find_gpu("h100").bf16_flops, 989e12);
  EXPECT_DOUBLE_EQ(find_gpu("h800").fp8_flops, 1979e12);
  EXPECT_DOUBLE_EQ(find_gpu("h200").hbm_bytes, 141e9);
  EXPECT_EQ(find_gpu("gb200-nvl72").nvlink_domain, 72);
  EXPECT_DOUBLE_EQ(find_gpu("gb200-nvl72").fp4_flops, 10000e12);
  EXPECT_DOUBLE_EQ(find_gpu("a100").fp8_flops, 0);
  EXPECT_GT(find_gpu("b200").bf16_flops, 0);
  EXPECT_THROW(find_gpu("tpu"), Error);
}

TEST(Layouts, ParseAndPrint) {
  LayoutFields f;
  const Layout l = parse_layout(
      "tp=8,pp=16,cp=2,dp=64,schedule=interleaved,chunks=4,"
      "recompute=selective,precision=fp8,zero=2,mb=2",
      &f);
  EXPECT_EQ(l.gpus(), 8L * 16 * 2 * 64);
  EXPECT_TRUE(f.tp && f.pp && f.cp && f.dp && f.schedule && f.chunks && f.micro_batch);
  EXPECT_FALSE(f.ep);
  EXPECT_EQ(l.micro_batch, 2);
  EXPECT_EQ(l.to_string(),
            "tp=8,sp=1,pp=16,cp=2,ep=1,dp=64,zero=2,schedule=interleaved,chunks=4,"
            "partition=even,recompute=selective,micro_batch=2,precision=fp8,grad=fp32,moments=fp32,"
            "alloc=slots,act=fp8,ema=none,cp_comm=ring,p2p=async");
  const Layout g =
      parse_layout("sp=0,grad=bf16,moments=bf16,partition=balanced,precision=fp16,alloc=live", &f);
  EXPECT_FALSE(g.sp);
  EXPECT_EQ(g.grad_bytes, 2);
  EXPECT_EQ(g.moment_bytes, 2);
  EXPECT_EQ(g.partition, Partition::kBalanced);
  EXPECT_EQ(g.precision, Precision::kFp16);
  EXPECT_EQ(g.allocation, Allocation::kLive);
  EXPECT_TRUE(f.sp && f.grad && f.moments && f.partition && f.allocation);
  // DeepSeek-V3's memory techniques (§3.2.3, §3.3.3): norm-up recompute, the FP8 activation
  // cache and the EMA's place; they round-trip through the text form.
  const Layout d = parse_layout("recompute=norm-up,act=bf16,ema=host,precision=fp8", &f);
  EXPECT_EQ(d.recompute_policy(), RecomputePolicy::kNormUp);
  EXPECT_EQ(d.recompute, Recompute::kNone);  // the engine's enum is unchanged
  EXPECT_FALSE(d.fp8_activations());
  EXPECT_EQ(d.ema, Ema::kHost);
  EXPECT_TRUE(f.recompute && f.act && f.ema);
  EXPECT_EQ(parse_layout(d.to_string()).to_string(), d.to_string());
  // The communication choices the published runs pin (docs/planner.md, --validate).
  const Layout c = parse_layout("cp_comm=allgather,p2p=blocking", &f);
  EXPECT_TRUE(c.cp_all_gather && c.blocking_p2p && f.cp_comm && f.p2p);
  EXPECT_THROW(parse_layout("cp_comm=ulysses"), Error);
  EXPECT_THROW(parse_layout("p2p=sync"), Error);
  EXPECT_THROW(parse_layout("act=fp4"), Error);
  EXPECT_THROW(parse_layout("ema=disk"), Error);
  EXPECT_THROW(parse_layout("recompute=norms"), Error);
  EXPECT_THROW(parse_layout("alloc=pool"), Error);
  EXPECT_THROW(parse_layout("grad=fp16"), Error);
  EXPECT_THROW(parse_layout("sp=2"), Error);
  EXPECT_THROW(parse_layout("tp=x"), Error);
  EXPECT_THROW(parse_layout("tq=8"), Error);
  EXPECT_THROW(parse_layout("zero=4"), Error);
  EXPECT_THROW(parse_layout("schedule=zigzag"), Error);
  EXPECT_THROW(parse_layout("tp8"), Error);
}

}  // namespace
}  // namespace trillion::plan
