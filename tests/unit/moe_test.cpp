// Mixture of Experts: every parameter's gradient (router, shared and routed experts, and the
// dense layers around them) against central finite differences in f64 of the whole objective
// (cross-entropy + the sequence-wise balance loss), for both routers and the sigmoid one with
// group-limited routing; group-limited routing on hand-computed scores and its keys' checks; the
// routing bias gets no gradient; split backward equals fused bitwise; the balancing rule moves
// the bias against the load; the parameter table matches the planner; ZeRO-3's split of a MoE
// unit (dense part, routing bias kept whole, experts) and its bindings.
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "model/transformer.h"
#include "parallel/whole_tensors.h"
#include "plan/model_spec.h"
#include "plan/parameter_table.h"
#include "test_util.h"

using namespace trillion;
using namespace trillion::testing;

namespace {

// router: "sigmoid_bias", "softmax_aux", or "grouped" (sigmoid_bias with 2 groups of 2 experts,
// each token's experts from the better one).
ModelConfig tiny_moe(const std::string& router) {
  ModelConfig c;
  c.vocab_size = 17;
  c.d_model = 12;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.ffn_hidden = 16;
  c.seq_len = 5;
  c.init_std = 0.3;
  c.dtype = DType::f64;
  c.moe.n_dense_layers = 1;
  c.moe.n_routed_experts = 4;
  c.moe.n_shared_experts = 1;
  c.moe.top_k = 2;
  c.moe.expert_ffn = 6;
  c.moe.router = router == "grouped" ? "sigmoid_bias" : router;
  if (router == "grouped") c.moe.n_group = 2, c.moe.topk_group = 1;
  c.moe.balance_loss_alpha = 0.3;  // large, so its gradient is visible
  c.validate();
  return c;
}

std::vector<int32_t> tokens_of(int64_t n, int64_t vocab, uint64_t seed) {
  Philox rng(seed, "tokens");
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>(rng.below(i, vocab));
  return t;
}

}  // namespace

class MoeGradient : public ::testing::TestWithParam<const char*> {};

TEST_P(MoeGradient, EveryParameterMatchesFiniteDifferencesOfLossPlusBalance) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const ModelConfig cfg = tiny_moe(GetParam());
  const int64_t B = 3, T = 5, N = B * T;
  Transformer model(cfg, {B, T}, *be, tracker);
  model.init_parameters(3);
  // A non-zero routing bias changes which experts are chosen, never the gradient.
  if (model.table().contains("layers.1.moe.router_bias")) {
    double* b = model.parameter_set().param("layers.1.moe.router_bias").data<double>();
    for (int i = 0; i < 4; ++i) b[i] = 0.05 * (i - 1.5);
  }
  auto tokens = tokens_of(N, cfg.vocab_size, 1), targets = tokens_of(N, cfg.vocab_size, 2);
  // The objective the backward differentiates: mean cross-entropy + the balance loss's mean over
  // the sequences.
  auto objective = [&] {
    const double ce = model.forward(tokens.data(), targets.data());
    return ce + model.stage().balance_loss(0) / static_cast<double>(B);
  };
  model.zero_grad();
  objective();
  model.backward(1.0 / N);
  auto* params = static_cast<double*>(model.parameters().raw());
  const auto* grads = static_cast<const double*>(model.gradients().raw());
  for (const TensorSpec& spec : model.table().specs()) {
    if (spec.name.ends_with("router_bias")) {
      for (int64_t i = 0; i < spec.numel(); ++i) EXPECT_EQ(grads[spec.offset + i], 0.0);
      continue;
    }
    const double err =
        gradient_error(objective, params + spec.offset, spec.numel(), grads + spec.offset, 24);
    EXPECT_LT(err, 1e-6) << spec.name << " (" << GetParam() << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(Routers, MoeGradient,
                         ::testing::Values("sigmoid_bias", "softmax_aux", "grouped"));

TEST(Moe, SplitBackwardEqualsFusedBitwiseAndCapacityDrops) {
  for (double capacity : {0.0, 0.6}) {
    MemoryTracker tracker;
    auto be = make_cpu_backend(tracker);
    ModelConfig cfg = tiny_moe("sigmoid_bias");
    cfg.dtype = DType::f32;
    cfg.moe.capacity_factor = capacity;
    Transformer fused(cfg, {3, 5}, *be, tracker), split(cfg, {3, 5}, *be, tracker, true);
    fused.init_parameters(5);
    split.init_parameters(5);
    auto tokens = tokens_of(15, cfg.vocab_size, 4), targets = tokens_of(15, cfg.vocab_size, 5);
    for (Transformer* m : {&fused, &split}) {
      m->zero_grad();
      m->forward(tokens.data(), targets.data());
    }
    fused.backward(1.0 / 15);
    split.backward_input(1.0 / 15);
    split.backward_weight();
    EXPECT_EQ(
        std::memcmp(fused.gradients().raw(), split.gradients().raw(), fused.gradients().bytes()), 0)
        << "capacity " << capacity;
    const MoeStepStats st = fused.stage().take_moe_stats();
    ASSERT_EQ(st.layers, std::vector<int64_t>{1});
    double routed = 0;
    for (double l : st.loads[0]) routed += l;
    EXPECT_EQ(routed + st.dropped, 15 * 2);  // every assignment is routed or dropped
    if (capacity == 0) {
      EXPECT_EQ(st.dropped, 0);
    }
    // cf 0.6: ceil(0.6 * 15 * 2 / 4) = 5 rows per expert at most.
    if (capacity > 0) {
      for (double l : st.loads[0]) EXPECT_LE(l, 5);
      EXPECT_GT(st.dropped, 0);
    }
  }
}

// Group-limited routing on hand-computed scores: E = 8 experts in n_group = 4 groups of 2 (by
// index), topk_group = 2, top 2. The router weight is the identity (C = E), so z = x and
// s = sigmoid(x) are chosen directly; bias b_7 = 0.65 steers the choice, never the gates.
TEST(Moe, GroupLimitedRoutingKeepsTheBestGroupsByTheirTopTwoSums) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  ModelConfig c = tiny_moe("sigmoid_bias");
  c.d_model = 8;
  c.n_heads = 1;
  c.n_kv_heads = 1;
  c.head_dim = 0;
  c.seq_len = 3;
  c.moe.n_routed_experts = 8;
  c.moe.n_group = 4;
  c.moe.topk_group = 2;
  c.validate();
  const std::vector<std::vector<double>> s = {
      // groups {0,1} {2,3} {4,5} {6,7+b}: sums 1.0, 1.5, 0.9, 1.15 -> groups 1 and 3; the
      // allowed keys 0.8, 0.7, 0.2, 0.95 give experts 7 and 2 (unrestricted: 7 and 0, then 4).
      {0.9, 0.1, 0.8, 0.7, 0.85, 0.05, 0.2, 0.3},
      // all 0.5: group 3 (1.65) and of the tied rest the lowest, group 0; then 7 (1.15) and of
      // the tied 0, 1, 6 the lowest, 0.
      {0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5},
      // sums 0.3, 0.7, 1.1, 2.15 -> groups 3 and 2; experts 7 (1.45) and 6 (0.7).
      {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8}};
  const std::vector<std::vector<int>> want = {{7, 2}, {7, 0}, {7, 6}};
  const std::vector<std::vector<int>> want_unlimited = {{7, 0}, {7, 0}, {7, 6}};
  for (int64_t topk_group : {2, 4}) {
    MoeConfig mc = c.moe;
    mc.topk_group = topk_group;
    const ParallelContext ctx = ParallelContext::single(c, 1, 3);
    Router router(*be, ctx, mc);
    Buffer buf(tracker, MemoryCategory::workspace, DType::f64, 3 * (8 + 2) + 3 * 8 + 8 * 8 + 8);
    Routing r;
    Carver carver(buf);
    router.carve(carver, r);
    const Tensor x = carver.take({3, 8}), w = carver.take({8, 8}), bias = carver.take({8});
    for (int t = 0; t < 3; ++t)
      for (int i = 0; i < 8; ++i) x.data<double>()[t * 8 + i] = std::log(s[t][i] / (1 - s[t][i]));
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 8; ++j) w.data<double>()[i * 8 + j] = i == j ? 1.0 : 0.0;
    for (int i = 0; i < 8; ++i) bias.data<double>()[i] = i == 7 ? 0.65 : 0.0;
    router.forward(x, {w, bias}, r);
    for (int t = 0; t < 3; ++t) {
      const auto& e = topk_group == 2 ? want[t] : want_unlimited[t];
      ASSERT_EQ(r.expert[t * 2], e[0]) << "token " << t << " topk_group " << topk_group;
      ASSERT_EQ(r.expert[t * 2 + 1], e[1]) << "token " << t << " topk_group " << topk_group;
      // Gates: the chosen s (not s + b) normalised.
      const double sum = s[t][e[0]] + s[t][e[1]];
      EXPECT_NEAR(r.gates.data<double>()[t * 2], s[t][e[0]] / sum, 1e-12);
      EXPECT_NEAR(r.gates.data<double>()[t * 2 + 1], s[t][e[1]] / sum, 1e-12);
    }
  }
}

// The group keys are checked by name.
TEST(Moe, GroupKeysAreValidatedByName) {
  auto error = [](int64_t n_group, int64_t topk_group, const std::string& router) {
    ModelConfig c = tiny_moe("sigmoid_bias");  // 4 experts, top 2
    c.moe.n_group = n_group;
    c.moe.topk_group = topk_group;
    c.moe.router = router;
    try {
      c.validate();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error(2, 1, "sigmoid_bias"), "");
  EXPECT_NE(error(3, 1, "sigmoid_bias")
                .find("model.n_group = 3 must be >= 1 and divide "
                      "model.n_routed_experts = 4"),
            std::string::npos);
  EXPECT_NE(error(2, 3, "sigmoid_bias").find("model.topk_group = 3 must be in [1, model.n_group"),
            std::string::npos);
  EXPECT_NE(error(4, 2, "sigmoid_bias").find("groups of 1 expert"), std::string::npos);
  ModelConfig k3 = tiny_moe("sigmoid_bias");
  k3.moe.top_k = 3;
  k3.moe.n_group = 2;
  k3.moe.topk_group = 1;
  EXPECT_THROW(
      {
        try {
          k3.validate();
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("keeps 2 experts (1 groups of 2), fewer than "
                                               "model.top_k = 3"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
  EXPECT_NE(error(2, 1, "softmax_aux").find("router = \"sigmoid_bias\" or n_group = 1"),
            std::string::npos);
}

TEST(Moe, BiasMovesAgainstTheLoad) {
  MemoryTracker tracker;
  Buffer b(tracker, MemoryCategory::parameters, DType::f32, 4);
  Router::update_bias(b.flat(), {10, 2, 4, 4}, 0.001);  // mean 5
  const float* v = static_cast<const float*>(b.raw());
  EXPECT_FLOAT_EQ(v[0], -0.001f);  // overloaded: less attractive
  EXPECT_FLOAT_EQ(v[1], 0.001f);
  EXPECT_FLOAT_EQ(v[2], 0.001f);
  EXPECT_FLOAT_EQ(v[3], 0.001f);
}

TEST(Moe, TableCountsAreThePlannersAndActivatedIsTopK) {
  const ModelConfig cfg = tiny_moe("sigmoid_bias");
  const TensorTable t = build_parameter_table(cfg);
  const plan::ModelCounts c = plan::count_model(cfg.spec());
  EXPECT_EQ(t.total_elements(), c.total);
  // Activated: everything but 2 of the 4 routed experts of the MoE layer.
  EXPECT_EQ(c.total - c.activated, 2 * 3 * 12 * 6);
  EXPECT_TRUE(t.contains("layers.1.moe.router_bias"));
  EXPECT_FALSE(build_parameter_table(tiny_moe("softmax_aux")).contains("layers.1.moe.router_bias"));
}

// The MoE unit is dense tensors | routing bias | routed experts; under ZeRO-3 the bias lives in
// WholeTensors' buffer (bound for good), the stores' parts leave it out, and binding one part of
// a unit leaves the other parts' tensors as they were.
TEST(Moe, RoutingBiasSitsBetweenDenseAndExpertsAndIsBoundWholeOutsideTheStores) {
  const ModelConfig cfg = tiny_moe("sigmoid_bias");
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  ParameterSet params(build_parameter_table(cfg), {}, cfg.dtype, *be, tracker,
                      ModelStorage{.parameters = false, .gradients = false});
  const TensorTable& t = params.table();
  const int bias = t.index("layers.1.moe.router_bias");
  EXPECT_TRUE(plan::is_routing_bias(t.spec(bias)));
  EXPECT_FALSE(plan::is_routing_bias(t.spec(t.index("layers.1.moe.router"))));
  const int unit = params.unit_of(bias);
  const int64_t E = 4;
  EXPECT_EQ(t.spec(bias).offset + E, t.spec(t.index("layers.1.moe.experts.w_gate")).offset);
  EXPECT_EQ(t.spec(bias).offset, t.spec(t.index("layers.1.moe.shared.w_down")).offset +
                                     t.spec(t.index("layers.1.moe.shared.w_down")).numel());

  const parallel::WholeTensors whole(params, plan::is_routing_bias, *be, tracker);
  ASSERT_EQ(whole.specs(), std::vector<int>{bias});
  EXPECT_EQ(tracker.current(MemoryCategory::parameters), E * 8);  // f64, only the bias
  const parallel::UnitParts parts = parallel::unit_parts(params, &whole);
  const UnitRange r = params.unit_range(unit);
  EXPECT_EQ(parts.dense[unit].begin, r.begin);
  EXPECT_EQ(parts.dense[unit].end, t.spec(bias).offset);
  EXPECT_EQ(parts.expert[unit].begin, t.spec(bias).offset + E);
  EXPECT_EQ(parts.expert[unit].end, r.end);
  EXPECT_EQ(parts.expert[0].size(), 0);  // the dense layer's unit has no expert part
  EXPECT_EQ(parts.dense[0].size(), params.unit_range(0).size());

  // Bind the dense part: the bias stays in WholeTensors' buffer, the experts unbound.
  std::vector<double> dense(parts.dense[unit].size(), 0.0);
  params.bind_parameters(unit, parts.dense[unit], dense.data());
  EXPECT_EQ(params.param(bias).raw(), whole.buffer().raw());
  EXPECT_EQ(params.param("layers.1.moe.router").raw(),
            dense.data() + (t.spec(t.index("layers.1.moe.router")).offset - r.begin));
  EXPECT_THROW(params.param("layers.1.moe.experts.w_gate"), std::exception);
  params.bind_parameters(unit, parts.dense[unit], nullptr);
  EXPECT_THROW(params.param("layers.1.moe.router"), std::exception);
  EXPECT_EQ(params.param(bias).raw(), whole.buffer().raw());
}
