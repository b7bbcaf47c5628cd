// Multi-token prediction (model/mtp.h): f64 finite-difference gradients of the whole objective
// (main + lambda / D sum of the depth losses) through the MTP modules, the shared embedding and
// head, at depth 1 and 2, tied and untied, and with a MoE block (both routers; its balance loss
// in the objective); the depth losses against a hand-assembled reference;
// split dgrad/wgrad equals the fused backward bitwise; two micro-steps equal one double step;
// parameter counts and stored activation bytes (dense and MoE modules) equal plan/'s; the main
// model is untouched by the modules (generation); a tiny model trains; config errors name the key.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "model/cached_decoder.h"
#include "model/transformer.h"
#include "optim/adamw.h"
#include "plan/activation_memory.h"
#include "plan/model_spec.h"
#include "plan/parameter_table.h"
#include "test_util.h"

using namespace trillion;
using namespace trillion::testing;

namespace {

ModelConfig mtp_config(DType dtype, int64_t depth, bool tied = false) {
  ModelConfig c;
  c.vocab_size = 13;
  c.d_model = 8;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.ffn_hidden = 12;
  c.seq_len = 6;
  c.tied_embeddings = tied;
  c.init_std = 0.3;  // large enough that every path carries a visible gradient
  c.dtype = dtype;
  c.mtp.depth = depth;
  c.mtp.loss_weight = 0.7;
  return c;
}

// Two layers, the second MoE (4 routed experts, top 2, a shared one): the modules' blocks are MoE
// blocks like it. A large balance-loss weight makes its gradient visible.
ModelConfig mtp_moe_config(DType dtype, int64_t depth, const std::string& router) {
  ModelConfig c = mtp_config(dtype, depth);
  c.n_layers = 2;
  c.moe.n_dense_layers = 1;
  c.moe.n_routed_experts = 4;
  c.moe.n_shared_experts = 1;
  c.moe.top_k = 2;
  c.moe.expert_ffn = 6;
  c.moe.router = router;
  c.moe.balance_loss_alpha = 0.3;
  return c;
}

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  Philox rng(seed, "tokens");
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>(rng.below(i, vocab));
  return t;
}

// The objective the backward differentiates: mean main loss + lambda / D * sum_k L_k / N.
double objective(Transformer& m, const std::vector<int32_t>& tokens,
                 const std::vector<int32_t>& targets) {
  const double main = m.forward(tokens.data(), targets.data());
  const std::vector<double> depth = m.stage().take_mtp_losses();
  const double N = static_cast<double>(tokens.size());
  double sum = 0;
  for (double x : depth) sum += x;
  const ModelConfig& c = m.config();
  return main + (c.mtp.enabled() ? c.mtp.loss_weight / c.mtp.depth * sum / N : 0.0);
}

std::vector<double> host_copy(const Tensor& t) {  // an f64 tensor's values
  const double* p = t.data<double>();
  return std::vector<double>(p, p + t.numel());
}

// RMSNorm of row x [C] with weight w.
std::vector<double> rmsnorm(const double* x, const double* w, int64_t C, double eps) {
  double ms = 0;
  for (int64_t c = 0; c < C; ++c) ms += x[c] * x[c];
  const double r = 1.0 / std::sqrt(ms / static_cast<double>(C) + eps);
  std::vector<double> y(C);
  for (int64_t c = 0; c < C; ++c) y[c] = x[c] * r * w[c];
  return y;
}

}  // namespace

class MtpGradientTest : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(MtpGradientTest, EveryParameterMatchesFiniteDifferencesInF64) {
  const auto [depth, tied] = GetParam();
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const ModelConfig cfg = mtp_config(DType::f64, depth, tied);
  Transformer model(cfg, {2, 6}, *be, tracker);
  model.init_parameters(7);
  const int64_t N = 12;
  auto tokens = random_tokens(N, cfg.vocab_size, 1), targets = random_tokens(N, cfg.vocab_size, 2);
  targets[4] = kIgnoredTarget;  // an ignored main target masks the depth targets that read it
  model.zero_grad();
  objective(model, tokens, targets);
  model.backward(1.0 / N);
  auto* params = static_cast<double*>(model.parameters().raw());
  const auto* grads = static_cast<const double*>(model.gradients().raw());
  auto loss = [&] { return objective(model, tokens, targets); };
  for (const TensorSpec& spec : model.table().specs()) {
    const double err =
        gradient_error(loss, params + spec.offset, spec.numel(), grads + spec.offset, 16);
    EXPECT_LT(err, 1e-6) << spec.name;
  }
}

INSTANTIATE_TEST_SUITE_P(DepthsTiedAndUntied, MtpGradientTest,
                         ::testing::Combine(::testing::Values(1, 2), ::testing::Bool()));

// A MoE module's block (DeepSeek-V3: the module's block is MoE like the last layer): every
// parameter, its router and routed and shared experts included, against finite differences of
// the main loss + lambda / D sum of the depth losses + every MoE layer's balance loss (the
// module's with the main layers' weight); the routing bias has none. Both routers, depth 1 and 2.
class MtpMoeGradientTest : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(MtpMoeGradientTest, EveryParameterMatchesFiniteDifferencesInF64) {
  const auto [depth, router] = GetParam();
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const ModelConfig cfg = mtp_moe_config(DType::f64, depth, router);
  const int64_t B = 2, N = 12;
  Transformer model(cfg, {B, 6}, *be, tracker);
  model.init_parameters(7);
  ASSERT_TRUE(model.table().contains("mtp.0.moe.experts.w_gate"));
  ASSERT_FALSE(model.table().contains("mtp.0.mlp.w_gate"));
  // A non-zero routing bias changes which experts are chosen, never the gradient.
  for (int64_t k = 0; k < depth; ++k) {
    const std::string bias = fmt::format("mtp.{}.moe.router_bias", k);
    if (!model.table().contains(bias)) continue;
    double* b = model.parameter_set().param(bias).data<double>();
    for (int i = 0; i < 4; ++i) b[i] = 0.04 * (1.5 - i);
  }
  auto tokens = random_tokens(N, cfg.vocab_size, 1), targets = random_tokens(N, cfg.vocab_size, 2);
  targets[4] = kIgnoredTarget;
  auto loss = [&] {
    const double main = objective(model, tokens, targets);
    return main + model.stage().balance_loss(0) / static_cast<double>(B);
  };
  model.zero_grad();
  loss();
  model.backward(1.0 / N);
  auto* params = static_cast<double*>(model.parameters().raw());
  const auto* grads = static_cast<const double*>(model.gradients().raw());
  for (const TensorSpec& spec : model.table().specs()) {
    if (spec.name.ends_with("router_bias")) {
      for (int64_t i = 0; i < spec.numel(); ++i) EXPECT_EQ(grads[spec.offset + i], 0.0);
      continue;
    }
    const double err =
        gradient_error(loss, params + spec.offset, spec.numel(), grads + spec.offset, 16);
    EXPECT_LT(err, 1e-6) << spec.name << " (" << router << ", depth " << depth << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(DepthsAndRouters, MtpMoeGradientTest,
                         ::testing::Combine(::testing::Values(1, 2),
                                            ::testing::Values(std::string("sigmoid_bias"),
                                                              std::string("softmax_aux"))),
                         [](const auto& info) {
                           return std::get<1>(info.param) + "_depth" +
                                  std::to_string(std::get<0>(info.param));
                         });

// With each module's block an identity (its output projections zero), depth k's loss is
// CE(head(final_norm_k(h^k)), t_{i+k+1}) with h^k = M_k [enorm(Emb(t_{i+k})); hnorm(h^{k-1})]:
// assembled here from the parameters by hand, with the shifts and the masking written out.
TEST(Mtp, DepthLossesEqualAHandAssembledReference) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const ModelConfig cfg = mtp_config(DType::f64, 2);
  const int64_t B = 2, T = 6, N = B * T, C = cfg.d_model, V = cfg.vocab_size;
  Transformer model(cfg, {B, T}, *be, tracker);
  model.init_parameters(3);
  auto param = [&](const std::string& name) {
    return model.table().view(model.parameters(), name).data<double>();
  };
  for (const char* zero :
       {"mtp.0.attn.wo", "mtp.0.mlp.w_down", "mtp.1.attn.wo", "mtp.1.mlp.w_down"}) {
    Tensor t = model.table().view(model.parameters(), zero);
    std::fill(t.data<double>(), t.data<double>() + t.numel(), 0.0);
  }
  auto tokens = random_tokens(N, V, 5), targets = random_tokens(N, V, 6);
  targets[B * T - 4] = kIgnoredTarget;
  model.forward(tokens.data(), targets.data());
  const std::vector<double> got = model.stage().take_mtp_losses();
  ASSERT_EQ(got.size(), 2u);

  std::vector<double> h = host_copy(model.stage().output(0));  // h^0 [N, C]
  const double eps = cfg.norm_eps;
  for (int64_t k = 1; k <= 2; ++k) {
    const std::string p = fmt::format("mtp.{}.", k - 1);
    const double *enorm = param(p + "enorm"), *hnorm = param(p + "hnorm");
    const double *M = param(p + "eh_proj"), *fnorm = param(p + "final_norm");
    const double *embed = param("embed"), *head = param("lm_head");
    std::vector<double> next(N * C, 0.0);
    double expect = 0;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < T; ++i) {
        const int64_t n = b * T + i;
        // t_{i+k} is the main target at i + k - 1; the target t_{i+k+1} the one at i + k.
        const bool has_token = i + k - 1 < T && targets[n + k - 1] != kIgnoredTarget;
        const int32_t tok = has_token ? targets[n + k - 1] : 0;
        const bool has_target = has_token && i + k < T && targets[n + k] != kIgnoredTarget;
        const std::vector<double> e = rmsnorm(embed + tok * C, enorm, C, eps);
        const std::vector<double> hn = rmsnorm(h.data() + n * C, hnorm, C, eps);
        for (int64_t r = 0; r < C; ++r) {
          double s = 0;
          for (int64_t c = 0; c < C; ++c)
            s += M[r * 2 * C + c] * e[c] + M[r * 2 * C + C + c] * hn[c];
          next[n * C + r] = s;
        }
        if (!has_target) continue;
        const std::vector<double> f = rmsnorm(next.data() + n * C, fnorm, C, eps);
        double mx = -1e300;
        std::vector<double> logits(V);
        for (int64_t v = 0; v < V; ++v) {
          double s = 0;
          for (int64_t c = 0; c < C; ++c) s += head[v * C + c] * f[c];
          logits[v] = s;
          mx = std::max(mx, s);
        }
        double z = 0;
        for (double l : logits) z += std::exp(l - mx);
        expect += mx + std::log(z) - logits[targets[n + k]];
      }
    }
    EXPECT_NEAR(got[k - 1], expect, 1e-10 * std::max(1.0, expect)) << "depth " << k;
    h = next;
  }
}

TEST(Mtp, SplitBackwardEqualsFusedBitwise) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const ModelConfig cfg = mtp_config(DType::f32, 2, /*tied=*/true);
  Transformer fused(cfg, {3, 6}, *be, tracker);
  Transformer split(cfg, {3, 6}, *be, tracker, /*split_backward=*/true);
  fused.init_parameters(3);
  split.init_parameters(3);
  auto tokens = random_tokens(18, cfg.vocab_size, 4),
       targets = random_tokens(18, cfg.vocab_size, 5);
  for (Transformer* m : {&fused, &split}) {
    m->zero_grad();
    m->forward(tokens.data(), targets.data());
  }
  fused.backward(1.0 / 18);
  split.backward_input(1.0 / 18);
  split.backward_weight();
  const size_t bytes = fused.gradients().bytes();
  EXPECT_EQ(std::memcmp(fused.gradients().raw(), split.gradients().raw(), bytes), 0);
}

TEST(Mtp, TwoMicroBatchesEqualOneConcatenatedBatch) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const ModelConfig cfg = mtp_config(DType::f64, 2);
  Transformer half(cfg, {2, 6}, *be, tracker), whole(cfg, {4, 6}, *be, tracker);
  half.init_parameters(11);
  whole.init_parameters(11);
  auto tokens = random_tokens(24, cfg.vocab_size, 6),
       targets = random_tokens(24, cfg.vocab_size, 7);
  half.zero_grad();
  double loss_half = 0;
  for (int micro = 0; micro < 2; ++micro) {
    const std::vector<int32_t> tok(tokens.begin() + 12 * micro, tokens.begin() + 12 * micro + 12);
    const std::vector<int32_t> tgt(targets.begin() + 12 * micro, targets.begin() + 12 * micro + 12);
    loss_half += 0.5 * objective(half, tok, tgt);
    half.backward(1.0 / 24);  // mean over all 24 tokens of the step
  }
  whole.zero_grad();
  const double loss_whole = objective(whole, tokens, targets);
  whole.backward(1.0 / 24);
  EXPECT_NEAR(loss_half, loss_whole, 1e-12);
  const auto* a = static_cast<const double*>(half.gradients().raw());
  const auto* b = static_cast<const double*>(whole.gradients().raw());
  for (int64_t i = 0; i < half.table().total_elements(); ++i) ASSERT_NEAR(a[i], b[i], 1e-12) << i;
}

TEST(Mtp, ParameterCountsEqualThePlan) {
  for (int64_t depth : {1, 2}) {
    MemoryTracker tracker;
    auto be = make_cpu_backend(tracker);
    const ModelConfig cfg = mtp_config(DType::f32, depth);
    Transformer model(cfg, {1, 6}, *be, tracker);
    const plan::ModelCounts counts = plan::count_model(model.config().spec());
    EXPECT_EQ(model.table().total_elements(), counts.total);
    ModelConfig main = cfg;
    main.mtp.depth = 0;
    main.validate();
    const plan::ModelCounts main_counts = plan::count_model(main.spec());
    EXPECT_EQ(counts.total - counts.mtp, main_counts.total);
    // Per module: enorm, hnorm, eh_proj, one dense layer, final norm.
    const int64_t C = cfg.d_model;
    const int64_t layer = main_counts.attention + main_counts.dense_mlp + main_counts.norms;
    EXPECT_EQ(counts.mtp, depth * (2 * C + 2 * C * C + layer + C));
  }
}

// The modules' stored activations (each keeps its block whole, whatever the main layers
// recompute) are plan/'s, to the byte; a second module adds exactly as much as the first.
TEST(Mtp, ActivationBytesEqualThePlanForEveryPolicy) {
  for (const char* policy : {"none", "selective", "full"}) {
    int64_t added[3] = {0, 0, 0};
    for (int64_t depth : {0, 1, 2}) {
      MemoryTracker tracker;
      auto be = make_cpu_backend(tracker);
      ModelConfig cfg = mtp_config(DType::f32, depth);
      cfg.n_layers = 2;
      cfg.set_recompute(policy);
      Transformer model(cfg, {3, 6}, *be, tracker);
      const plan::ActivationBytes predicted = plan::engine_activation_bytes(
          model.config().spec(), 3, 6, model.config().activation_policy(), 4, 4);
      const auto measured = static_cast<int64_t>(tracker.current(MemoryCategory::activations));
      EXPECT_EQ(measured, predicted.total()) << policy << " depth " << depth;
      added[depth] = measured;
    }
    EXPECT_GT(added[1], added[0]) << policy;
    EXPECT_EQ(added[2] - added[1], added[1] - added[0]) << policy;
  }
  // A MoE module keeps a MoE layer's tensors (the router's scores and gates, the shared experts'):
  // plan/'s too, and more than a dense module would (the expert rows come per micro-batch).
  for (const char* policy : {"none", "selective"}) {
    int64_t added[3] = {0, 0, 0};
    for (int64_t depth : {0, 1, 2}) {
      MemoryTracker tracker;
      auto be = make_cpu_backend(tracker);
      ModelConfig cfg = mtp_moe_config(DType::f32, depth, "sigmoid_bias");
      cfg.set_recompute(policy);
      Transformer model(cfg, {3, 6}, *be, tracker);
      const plan::ActivationBytes predicted = plan::engine_activation_bytes(
          model.config().spec(), 3, 6, model.config().activation_policy(), 4, 4);
      const auto measured = static_cast<int64_t>(tracker.current(MemoryCategory::activations));
      EXPECT_EQ(measured, predicted.total()) << "MoE, " << policy << " depth " << depth;
      added[depth] = measured;
    }
    EXPECT_GT(added[1], added[0]) << policy;
    EXPECT_EQ(added[2] - added[1], added[1] - added[0]) << policy;
  }
}

TEST(Mtp, DeepSeekV3CountsItsMtpModuleApart) {
  plan::ModelSpec m = plan::find_model("deepseek-v3");
  EXPECT_EQ(m.mtp_depth, 1);  // the catalog's DeepSeek-V3 has its module, as trained
  m.mtp_depth = 0;
  const plan::ModelCounts main = plan::count_model(m);
  m.mtp_depth = 1;
  const plan::ModelCounts with = plan::count_model(m);
  EXPECT_EQ(with.total - with.mtp, main.total);  // the 671B main model is unchanged
  // One MoE layer (MLA attention, router, 1 shared + 256 routed experts), eh_proj [C, 2C] and
  // three norms; the embedding and the head are shared, so not counted again.
  const int64_t C = m.d_model;
  const int64_t moe_layer = main.attention + main.norms + main.router +
                            (m.n_shared_experts + m.n_routed_experts) * main.expert;
  EXPECT_EQ(with.mtp, moe_layer + 2 * C * C + 3 * C);
  EXPECT_NEAR(static_cast<double>(with.mtp), 11.6e9, 0.1e9);
}

TEST(Mtp, MainModelAndGenerationAreUnchangedByTheModules) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  Transformer plain(mtp_config(DType::f32, 0), {1, 6}, *be, tracker);
  Transformer with(mtp_config(DType::f32, 2), {1, 6}, *be, tracker);
  plain.init_parameters(9);
  with.init_parameters(9);  // init is keyed by name: the main model's tensors are the same
  auto tokens = random_tokens(6, 13, 1), targets = random_tokens(6, 13, 2);
  EXPECT_EQ(plain.forward(tokens.data(), targets.data()),
            with.forward(tokens.data(), targets.data()));
  EXPECT_EQ(std::memcmp(plain.final_hidden().raw(), with.final_hidden().raw(),
                        plain.final_hidden().bytes()),
            0);
  // The cached decoder `trillion generate` uses reads the main model's tensors by name.
  CachedDecoder a(plain.config(), plain.table(), plain.parameters(), *be, tracker);
  CachedDecoder b(with.config(), with.table(), with.parameters(), *be, tracker);
  for (int32_t t : tokens) {
    const Tensor& la = a.step(t);
    const Tensor& lb = b.step(t);
    ASSERT_EQ(std::memcmp(la.raw(), lb.raw(), la.bytes()), 0);
  }
}

TEST(Mtp, TrainingLowersEveryDepthLoss) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const ModelConfig cfg = mtp_config(DType::f32, 2);
  Transformer model(cfg, {2, 6}, *be, tracker);
  model.init_parameters(1);
  AdamW opt(model.table(), DType::f32, {0.9, 0.95, 1e-8, 0.0}, *be, tracker);
  auto tokens = random_tokens(12, cfg.vocab_size, 8),
       targets = random_tokens(12, cfg.vocab_size, 9);
  std::vector<double> first, last;
  for (int step = 0; step < 80; ++step) {
    model.zero_grad();
    model.forward(tokens.data(), targets.data());
    last = model.stage().take_mtp_losses();
    if (step == 0) first = last;
    model.backward(1.0 / 12);
    opt.step(model.parameters(), model.gradients(), 1e-2);
  }
  for (size_t k = 0; k < first.size(); ++k) EXPECT_LT(last[k], 0.1 * first[k]) << "depth " << k + 1;
}

TEST(Mtp, ConfigErrorsNameTheKey) {
  auto message = [](ModelConfig c) {
    try {
      c.validate();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  ModelConfig c = mtp_config(DType::f32, -1);
  EXPECT_NE(message(c).find("model.mtp_depth = -1"), std::string::npos) << message(c);
  c = mtp_config(DType::f32, 1);
  c.mtp.loss_weight = -0.5;
  EXPECT_NE(message(c).find("model.mtp_loss_weight = -0.5"), std::string::npos) << message(c);
  c = mtp_config(DType::f32, 1);
  c.mtp.loss_weight_after = 0.1;  // without a switch step
  EXPECT_NE(message(c).find("mtp_loss_weight_switch_step"), std::string::npos) << message(c);
  c.mtp.switch_step = 100;
  EXPECT_EQ(message(c), "no error");
  EXPECT_EQ(c.mtp.weight_at(99), 0.7);
  EXPECT_EQ(c.mtp.weight_at(100), 0.1);
  c = mtp_config(DType::f32, 6);  // seq_len 6: no position has a target 7 ahead
  EXPECT_NE(message(c).find("use mtp_depth < seq_len"), std::string::npos) << message(c);
  c = mtp_moe_config(DType::f32, 1, "sigmoid_bias");  // a MoE module is a model like any other
  EXPECT_EQ(message(c), "no error");
}
