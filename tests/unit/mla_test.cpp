// Multi-head latent attention (model/mla.h): f64 finite-difference gradients of the MLA sublayer
// (its input and every weight; with and without query compression, tiled and materialised
// cores, value head dim equal to and different from the qk head dim) and of a whole MLA model;
// split dgrad/wgrad equals the fused backward; two micro-batches equal one double batch; every
// recompute policy gives bitwise the same gradients and carves exactly plan/'s activation bytes;
// config errors name the key.
#include "model/mla.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "model/transformer.h"
#include "plan/activation_memory.h"
#include "plan/parameter_table.h"
#include "test_util.h"

using namespace trillion;
using namespace trillion::testing;

namespace {

// The qk head is 4 + 4 = 8 wide; v_head_dim may differ.
ModelConfig tiny_mla(DType dtype, int64_t q_lora_rank, int64_t v_head_dim = 8) {
  ModelConfig c;
  c.vocab_size = 19;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.ffn_hidden = 24;
  c.seq_len = 6;
  c.init_std = 0.2;  // large enough that every path carries a visible gradient
  c.dtype = dtype;
  c.mla = true;
  c.mla_dims = {q_lora_rank, /*kv_lora_rank=*/8, /*qk_nope=*/4, /*qk_rope=*/4, v_head_dim};
  return c;
}

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  Philox rng(seed, "tokens");
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>(rng.below(i, vocab));
  return t;
}

struct SublayerCase {
  int64_t q_lora_rank;
  bool tiled;
  int64_t v_head_dim;
};

}  // namespace

class MlaSublayerTest : public ::testing::TestWithParam<SublayerCase> {};

// loss = sum(out * R) of out = Mla(x): dL/dx and every weight's gradient against central
// differences.
TEST_P(MlaSublayerTest, InputAndEveryWeightMatchFiniteDifferencesInF64) {
  const SublayerCase p = GetParam();
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  ModelConfig cfg = tiny_mla(DType::f64, p.q_lora_rank, p.v_head_dim);
  cfg.validate();
  const int64_t B = 2, T = 6, N = B * T, C = cfg.d_model, NH = cfg.n_heads;
  const MlaConfig& d = cfg.mla_dims;
  const int64_t HD = cfg.head_dim, VD = d.v_head_dim, DR = d.qk_rope_head_dim;
  ParallelContext ctx = ParallelContext::single(cfg, B, T);
  const AttentionBlocks blocks{4, 4};
  Mla mla(*be, ctx, d, cfg.norm_eps, p.tiled, blocks);
  Attention core_module(*be, ctx, p.tiled, blocks);  // carves the core's tensors

  // Weights (norm weights near 1, so their gradients are tested too) and their gradients.
  struct Named {
    const char* name;
    std::vector<double> value, grad;
    std::vector<int64_t> shape;
  };
  std::vector<Named> ws;
  auto add = [&](const char* name, std::vector<int64_t> shape, double scale, double offset) {
    const int64_t n = shape[0] * (shape.size() > 1 ? shape[1] : 1);
    std::vector<double> v = random_vector(n, 100 + ws.size(), scale);
    for (double& x : v) x += offset;
    ws.push_back({name, v, std::vector<double>(n, 0.0), shape});
  };
  const int64_t DQ = d.q_lora_rank, DC = d.kv_lora_rank;
  if (DQ > 0) {
    add("wq_a", {DQ, C}, 0.3, 0);
    add("q_norm", {DQ}, 0.2, 1);
  }
  add("wq", {NH * HD, DQ > 0 ? DQ : C}, 0.3, 0);
  add("wkv_a", {DC + DR, C}, 0.3, 0);
  add("kv_norm", {DC}, 0.2, 1);
  add("wkv_b", {NH * (d.qk_nope_head_dim + VD), DC}, 0.3, 0);
  add("wo", {C, NH * VD}, 0.3, 0);
  auto bind = [&](bool grads) {
    MlaWeights w;
    auto t = [&](const char* name) {
      for (Named& n : ws) {
        if (std::strcmp(n.name, name) != 0) continue;
        std::vector<double>& v = grads ? n.grad : n.value;
        return n.shape.size() == 1 ? Tensor(v.data(), DType::f64, {n.shape[0]})
                                   : Tensor(v.data(), DType::f64, {n.shape[0], n.shape[1]});
      }
      return Tensor();
    };
    w.wq_a = t("wq_a");
    w.q_norm = t("q_norm");
    w.wq = t("wq");
    w.wkv_a = t("wkv_a");
    w.kv_norm = t("kv_norm");
    w.wkv_b = t("wkv_b");
    w.wo = t("wo");
    return w;
  };
  const MlaWeights w = bind(false), g = bind(true);

  // Activations, stashes and scratch, carved like a block carves them.
  auto carve = [&](Carver& c, AttentionActivations& core, MlaActivations& a, AttentionStash& dc,
                   MlaStash& dm, Tensor& d_heads) {
    core = core_module.carve(c, c);
    a = mla.carve(c, c);
    dc = core_module.carve_stash(c);
    dm = mla.carve_stash(c);
    d_heads = core_module.carve_scratch(c);
  };
  AttentionActivations core;
  MlaActivations a;
  AttentionStash d_core;
  MlaStash d_mla;
  Tensor d_heads;
  Carver count;
  carve(count, core, a, d_core, d_mla, d_heads);
  Buffer buffer(tracker, MemoryCategory::activations, DType::f64, count.used());
  Carver take(buffer);
  carve(take, core, a, d_core, d_mla, d_heads);

  // RoPE table [T, DR] (rotate-half layout, as the stage builds it).
  std::vector<double> cs(T * DR);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < DR / 2; ++i) {
      const double angle = t * std::pow(cfg.rope_theta, -2.0 * i / DR);
      cs[t * DR + i] = std::cos(angle);
      cs[t * DR + DR / 2 + i] = std::sin(angle);
    }
  }
  const Tensor cos_sin = host(cs, {T, DR});
  std::vector<double> x = random_vector(N * C, 7), r = random_vector(N * C, 8);
  std::vector<double> out(N * C), dx(N * C);
  auto loss = [&] {
    std::fill(out.begin(), out.end(), 0.0);
    mla.forward(host(out, {N, C}), host(x, {N, C}), w, a, core, cos_sin);
    return dot(out, r);
  };
  loss();
  mla.backward_input(host(dx, {N, C}), host(r, {N, C}), w, a, core, d_core, d_mla, d_heads,
                     cos_sin);
  mla.backward_weight(g, host(x, {N, C}), host(r, {N, C}), a, core, d_core, d_mla);
  EXPECT_LT(gradient_error(loss, x.data(), N * C, dx.data(), 48), 1e-7) << "x";
  for (Named& n : ws) {
    EXPECT_LT(gradient_error(loss, n.value.data(), static_cast<int64_t>(n.value.size()),
                             n.grad.data(), 48),
              1e-7)
        << n.name;
  }
}

INSTANTIATE_TEST_SUITE_P(QueryCompressionAndCores, MlaSublayerTest,
                         ::testing::Values(SublayerCase{0, true, 8}, SublayerCase{12, true, 6},
                                           SublayerCase{12, false, 6}, SublayerCase{0, false, 10}));

class MlaModelGradientTest : public ::testing::TestWithParam<int64_t> {};

// q_lora_rank 0 with v_head_dim = the qk head dim (8), 12 with v_head_dim 6.
TEST_P(MlaModelGradientTest, EveryParameterMatchesFiniteDifferencesInF64) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const ModelConfig cfg = tiny_mla(DType::f64, GetParam(), GetParam() > 0 ? 6 : 8);
  Transformer model(cfg, {2, 6}, *be, tracker);
  model.init_parameters(7);
  const int64_t N = 12;
  auto tokens = random_tokens(N, cfg.vocab_size, 1), targets = random_tokens(N, cfg.vocab_size, 2);
  model.zero_grad();
  model.forward(tokens.data(), targets.data());
  model.backward(1.0 / N);
  auto* params = static_cast<double*>(model.parameters().raw());
  const auto* grads = static_cast<const double*>(model.gradients().raw());
  auto loss = [&] { return model.forward(tokens.data(), targets.data()); };
  int mla_tensors = 0;
  for (const TensorSpec& spec : model.table().specs()) {
    mla_tensors += spec.name.find("kv") != std::string::npos;
    const double err =
        gradient_error(loss, params + spec.offset, spec.numel(), grads + spec.offset, 16);
    EXPECT_LT(err, 1e-6) << spec.name;
  }
  EXPECT_EQ(mla_tensors, 2 * 3);  // wkv_a, kv_norm, wkv_b per layer: the MLA table
}

INSTANTIATE_TEST_SUITE_P(QueryCompression, MlaModelGradientTest, ::testing::Values(0, 12));

TEST(MlaModel, TwoMicroBatchesEqualOneDoubleBatchAndSplitBackwardIsBitwise) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const ModelConfig cfg = tiny_mla(DType::f32, 12, 6);
  Transformer half(cfg, {2, 6}, *be, tracker, /*split_backward=*/true);
  Transformer whole(cfg, {4, 6}, *be, tracker);
  half.init_parameters(11);
  whole.init_parameters(11);
  auto tokens = random_tokens(24, cfg.vocab_size, 6),
       targets = random_tokens(24, cfg.vocab_size, 7);
  half.zero_grad();
  double loss_half = 0;
  for (int micro = 0; micro < 2; ++micro) {
    loss_half += 0.5 * half.forward(tokens.data() + 12 * micro, targets.data() + 12 * micro);
    half.backward_input(1.0 / 24);  // mean over all 24 tokens of the step
    half.backward_weight();
  }
  whole.zero_grad();
  const double loss_whole = whole.forward(tokens.data(), targets.data());
  whole.backward(1.0 / 24);
  EXPECT_NEAR(loss_half, loss_whole, 1e-6);
  const auto* a = static_cast<const float*>(half.gradients().raw());
  const auto* b = static_cast<const float*>(whole.gradients().raw());
  double max_diff = 0, max_abs = 0;
  for (int64_t i = 0; i < half.table().total_elements(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::abs(a[i] - b[i])));
    max_abs = std::max(max_abs, static_cast<double>(std::abs(b[i])));
  }
  EXPECT_GT(max_abs, 0);
  EXPECT_LT(max_diff, 1e-6 * std::max(1.0, max_abs));
}

TEST(MlaRecompute, EveryPolicyGivesBitwiseTheSameGradientsAndPlansBytesExactly) {
  auto tokens = random_tokens(18, 19, 12), targets = random_tokens(18, 19, 13);
  for (int64_t q_lora : {int64_t{0}, int64_t{12}}) {
    for (bool tiled : {true, false}) {
      std::vector<char> reference;
      double reference_loss = 0;
      for (const char* policy : {"none", "selective", "full", "full:2", "norm-up"}) {
        MemoryTracker tracker;
        auto be = make_cpu_backend(tracker);
        ModelConfig c = tiny_mla(DType::f32, q_lora, q_lora > 0 ? 6 : 8);
        c.n_layers = 3;
        c.tiled_attention = tiled;
        c.set_recompute(policy);
        Transformer m(c, {3, 6}, *be, tracker);
        const plan::ActivationBytes predicted = plan::engine_activation_bytes(
            m.config().spec(), 3, 6, m.config().activation_policy(), 4, 4);
        EXPECT_EQ(tracker.current(MemoryCategory::activations),
                  static_cast<size_t>(predicted.total()))
            << policy << " tiled " << tiled << " q_lora " << q_lora;
        m.init_parameters(21);
        m.zero_grad();
        const double loss = m.forward(tokens.data(), targets.data());
        m.backward(1.0 / 18);
        const char* g = static_cast<const char*>(m.gradients().raw());
        if (reference.empty()) {
          reference.assign(g, g + m.gradients().bytes());
          reference_loss = loss;
          continue;
        }
        EXPECT_EQ(loss, reference_loss) << policy;
        EXPECT_EQ(std::memcmp(g, reference.data(), reference.size()), 0)
            << policy << " tiled " << tiled << " q_lora " << q_lora;
      }
    }
  }
}

// DeepSeek-V3's norm-up on a GQA model recomputes only the two norm outputs: bitwise the same
// gradients as none, plan/'s bytes, and less stored than none.
TEST(MlaRecompute, NormUpOnGqaRecomputesTheNorms) {
  auto tokens = random_tokens(18, 19, 12), targets = random_tokens(18, 19, 13);
  std::vector<char> reference;
  int64_t stored[2] = {0, 0};
  for (const char* policy : {"none", "norm-up"}) {
    MemoryTracker tracker;
    auto be = make_cpu_backend(tracker);
    ModelConfig c = tiny_mla(DType::f32, 0);
    c.mla = false;
    c.n_kv_heads = 2;
    c.set_recompute(policy);
    EXPECT_EQ(c.recompute_string(), policy);
    Transformer m(c, {3, 6}, *be, tracker, /*split_backward=*/true);
    const plan::ActivationBytes predicted = plan::engine_activation_bytes(
        m.config().spec(), 3, 6, m.config().activation_policy(), 4, 4);
    EXPECT_EQ(tracker.current(MemoryCategory::activations), static_cast<size_t>(predicted.total()))
        << policy;
    stored[reference.empty() ? 0 : 1] = predicted.stored;
    m.init_parameters(21);
    m.zero_grad();
    m.forward(tokens.data(), targets.data());
    m.backward_input(1.0 / 18);
    m.backward_weight();
    const char* g = static_cast<const char*>(m.gradients().raw());
    if (reference.empty()) {
      reference.assign(g, g + m.gradients().bytes());
      continue;
    }
    EXPECT_EQ(std::memcmp(g, reference.data(), reference.size()), 0) << policy;
  }
  // Two [N, C] norm outputs per layer fewer (fp32).
  EXPECT_EQ(stored[0] - stored[1], 2 * 2 * 18 * 16 * 4);
}

TEST(MlaConfig, SpecIsTheParameterTableTheEngineAllocates) {
  ModelConfig c = tiny_mla(DType::f32, 12);
  c.validate();
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  const plan::ModelSpec s = c.spec();
  EXPECT_TRUE(s.is_mla());
  EXPECT_EQ(s.qk_dim(), 8);
  const TensorTable t = plan::parameter_table(s, DType::f32);
  EXPECT_EQ(t.spec(t.index("layers.0.attn.wq_a")).global_shape, (std::vector<int64_t>{12, 16}));
  EXPECT_EQ(t.spec(t.index("layers.0.attn.wq_b")).global_shape, (std::vector<int64_t>{32, 12}));
  EXPECT_EQ(t.spec(t.index("layers.0.attn.wkv_a")).global_shape, (std::vector<int64_t>{12, 16}));
  EXPECT_EQ(t.spec(t.index("layers.0.attn.wkv_b")).global_shape, (std::vector<int64_t>{48, 8}));
  EXPECT_EQ(t.spec(t.index("layers.0.attn.wo")).global_shape, (std::vector<int64_t>{16, 32}));
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  Transformer m(c, {1, 6}, *be, tracker);
  EXPECT_EQ(m.table().total_elements(), t.total_elements());
}

TEST(MlaConfig, ErrorsNameTheKey) {
  auto error = [](auto edit) {
    ModelConfig c = tiny_mla(DType::f32, 0);
    edit(c);
    try {
      c.validate();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error([](ModelConfig& c) { c.mla_dims.kv_lora_rank = 0; }).find("kv_lora_rank"),
            std::string::npos);
  EXPECT_NE(error([](ModelConfig& c) { c.mla_dims.qk_rope_head_dim = 3; }).find("even"),
            std::string::npos);
  EXPECT_NE(error([](ModelConfig& c) { c.mla_dims.q_lora_rank = -1; }).find("q_lora_rank"),
            std::string::npos);
  EXPECT_NE(error([](ModelConfig& c) { c.n_kv_heads = 2; }).find("n_kv_heads"), std::string::npos);
  EXPECT_NE(error([](ModelConfig& c) { c.head_dim = 16; }).find("qk_nope_head_dim"),
            std::string::npos);
}
