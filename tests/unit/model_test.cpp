// Whole-model tests: finite-difference gradients of every parameter tensor in f64 (embedding
// through loss), split dgrad/wgrad equals the fused backward bitwise, gradient accumulation over
// two micro-batches equals one step on the concatenated batch, init independent of layout, and
// memory accounting equal to the plan/ formulas exactly.
#include <gtest/gtest.h>

#include "model/transformer.h"
#include "optim/adamw.h"
#include "plan/memory.h"
#include "plan/model_spec.h"
#include "test_util.h"

using namespace trillion;
using namespace trillion::testing;

namespace {

ModelConfig tiny_config(DType dtype, bool tied) {
  ModelConfig c;
  c.vocab_size = 19;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 24;
  c.seq_len = 6;
  c.tied_embeddings = tied;
  c.init_std = 0.2;  // large enough that every path carries a visible gradient
  c.dtype = dtype;
  return c;
}

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  Philox rng(seed, "tokens");
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>(rng.below(i, vocab));
  return t;
}

}  // namespace

class ModelGradientTest : public ::testing::TestWithParam<bool> {};

TEST_P(ModelGradientTest, EveryParameterMatchesFiniteDifferencesInF64) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const ModelConfig cfg = tiny_config(DType::f64, GetParam());
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
  for (const TensorSpec& spec : model.table().specs()) {
    const double err =
        gradient_error(loss, params + spec.offset, spec.numel(), grads + spec.offset, 24);
    EXPECT_LT(err, 1e-6) << spec.name;
  }
}

INSTANTIATE_TEST_SUITE_P(TiedAndUntied, ModelGradientTest, ::testing::Values(false, true));

TEST(Model, SplitBackwardEqualsFusedBitwise) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const ModelConfig cfg = tiny_config(DType::f32, false);
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

TEST(Model, TwoMicroBatchesEqualOneConcatenatedBatch) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const ModelConfig cfg = tiny_config(DType::f32, false);
  Transformer half(cfg, {2, 6}, *be, tracker);
  Transformer whole(cfg, {4, 6}, *be, tracker);
  half.init_parameters(11);
  whole.init_parameters(11);
  auto tokens = random_tokens(24, cfg.vocab_size, 6),
       targets = random_tokens(24, cfg.vocab_size, 7);
  half.zero_grad();
  double loss_half = 0;
  for (int micro = 0; micro < 2; ++micro) {
    loss_half += 0.5 * half.forward(tokens.data() + 12 * micro, targets.data() + 12 * micro);
    half.backward(1.0 / 24);  // mean over all 24 tokens of the step
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
  EXPECT_LT(max_diff, 1e-6 * std::max(1.0, max_abs));
}

TEST(Model, InitDependsOnlyOnSeedAndName) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  ModelConfig a = tiny_config(DType::f32, false);
  ModelConfig b = a;
  b.n_layers = 3;  // an extra layer must not change the values of the shared tensors
  Transformer ma(a, {1, 6}, *be, tracker), mb(b, {2, 6}, *be, tracker);
  ma.init_parameters(5);
  mb.init_parameters(5);
  for (const char* name : {"embed", "layers.1.attn.wk", "layers.0.mlp.w_gate", "final_norm"}) {
    Tensor ta = ma.table().view(ma.parameters(), name), tb = mb.table().view(mb.parameters(), name);
    EXPECT_EQ(std::memcmp(ta.raw(), tb.raw(), ta.bytes()), 0) << name;
  }
  // Norms start at one; residual projections have the smaller std.
  EXPECT_EQ(ma.table().view(ma.parameters(), "final_norm").data<float>()[3], 1.0f);
}

TEST(Model, MemoryEqualsThePlanFormulaExactly) {
  for (bool tied : {false, true}) {
    MemoryTracker tracker;
    auto be = make_cpu_backend(tracker);
    const ModelConfig cfg = tiny_config(DType::f32, tied);
    Transformer model(cfg, {2, 6}, *be, tracker);
    AdamW opt(model.table(), DType::f32, {}, *be, tracker);
    const int64_t count = plan::count_model(model.config().spec()).total;
    EXPECT_EQ(model.table().total_elements(), count);
    const plan::ModelStates expect = plan::zero_model_states(static_cast<double>(count), 0, 1, 4, 4, 8);
    EXPECT_EQ(tracker.current(MemoryCategory::parameters), static_cast<size_t>(expect.parameters));
    EXPECT_EQ(tracker.current(MemoryCategory::gradients), static_cast<size_t>(expect.gradients));
    EXPECT_EQ(tracker.current(MemoryCategory::optimizer), static_cast<size_t>(expect.optimizer));
  }
}

TEST(Model, ConfigErrorsNameTheField) {
  ModelConfig c = tiny_config(DType::f32, false);
  c.n_heads = 5;
  try {
    c.validate();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_heads = 5 does not divide model.d_model = 16"),
              std::string::npos)
        << e.what();
  }
  c = tiny_config(DType::f32, false);
  c.n_kv_heads = 3;
  EXPECT_THROW(c.validate(), Error);
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  c = tiny_config(DType::f32, false);
  EXPECT_THROW(Transformer(c, {1, 7}, *be, tracker), Error);  // longer than model.seq_len
}

TEST(Model, TrainingLowersTheLossOnARepeatedBatch) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const ModelConfig cfg = tiny_config(DType::f32, false);
  Transformer model(cfg, {2, 6}, *be, tracker);
  model.init_parameters(1);
  AdamW opt(model.table(), DType::f32, {0.9, 0.95, 1e-8, 0.0}, *be, tracker);
  auto tokens = random_tokens(12, cfg.vocab_size, 8),
       targets = random_tokens(12, cfg.vocab_size, 9);
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    model.zero_grad();
    last = model.forward(tokens.data(), targets.data());
    if (step == 0) first = last;
    model.backward(1.0 / 12);
    opt.step(model.parameters(), model.gradients(), 1e-2);
  }
  EXPECT_NEAR(first, std::log(19.0), 0.5);
  EXPECT_LT(last, 0.1);  // memorises 12 tokens
}

namespace {

struct PolicyCase {
  const char* recompute;
  bool tiled;
};

const PolicyCase kPolicies[] = {{"none", true},   {"selective", true}, {"full", true},
                                {"full:2", true}, {"none", false},     {"selective", false},
                                {"full", false},  {"full:3", false}};

}  // namespace

TEST(Recompute, EveryPolicyGivesBitwiseTheSameLossesAndGradients) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  ModelConfig base = tiny_config(DType::f32, false);
  base.n_layers = 3;
  auto tokens = random_tokens(18, base.vocab_size, 12),
       targets = random_tokens(18, base.vocab_size, 13);
  for (bool tiled : {true, false}) {
    std::vector<char> reference_grads;
    double reference_loss = 0;
    for (const PolicyCase& p : kPolicies) {
      if (p.tiled != tiled) continue;
      for (bool split : {false, true}) {
        ModelConfig c = base;
        c.tiled_attention = tiled;
        c.set_recompute(p.recompute);
        Transformer m(c, {3, 6}, *be, tracker, split);
        m.init_parameters(21);
        m.zero_grad();
        const double loss = m.forward(tokens.data(), targets.data());
        if (split) {
          m.backward_input(1.0 / 18);
          m.backward_weight();
        } else {
          m.backward(1.0 / 18);
        }
        const char* g = static_cast<const char*>(m.gradients().raw());
        if (reference_grads.empty()) {
          reference_grads.assign(g, g + m.gradients().bytes());
          reference_loss = loss;
          continue;
        }
        EXPECT_EQ(loss, reference_loss) << p.recompute << " tiled " << tiled;
        EXPECT_EQ(std::memcmp(g, reference_grads.data(), reference_grads.size()), 0)
            << p.recompute << " tiled " << tiled << " split " << split;
      }
    }
  }
}

TEST(Recompute, GradientsMatchFiniteDifferencesUnderFullRecompute) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  ModelConfig cfg = tiny_config(DType::f64, false);
  cfg.set_recompute("full:2");
  Transformer model(cfg, {2, 6}, *be, tracker);
  model.init_parameters(7);
  auto tokens = random_tokens(12, cfg.vocab_size, 1),
       targets = random_tokens(12, cfg.vocab_size, 2);
  model.zero_grad();
  model.forward(tokens.data(), targets.data());
  model.backward(1.0 / 12);
  auto* params = static_cast<double*>(model.parameters().raw());
  const auto* grads = static_cast<const double*>(model.gradients().raw());
  auto loss = [&] { return model.forward(tokens.data(), targets.data()); };
  for (const char* name : {"layers.0.attn.wq", "layers.1.mlp.w_up", "layers.0.attn_norm"}) {
    const TensorSpec& spec = model.table().spec(model.table().index(name));
    EXPECT_LT(gradient_error(loss, params + spec.offset, spec.numel(), grads + spec.offset, 24),
              1e-6)
        << name;
  }
}

TEST(Recompute, MeasuredActivationBytesEqualThePlanFormula) {
  // Three model shapes x every policy x both attention kinds.
  struct Shape {
    int64_t C, L, NH, KV, F, T, B;
  };
  for (const Shape& sh : {Shape{16, 2, 4, 2, 24, 6, 2}, Shape{32, 4, 4, 4, 64, 16, 3},
                          Shape{48, 3, 6, 2, 80, 12, 1}}) {
    for (const PolicyCase& p : kPolicies) {
      MemoryTracker tracker;
      auto be = make_cpu_backend(tracker);
      ModelConfig c = tiny_config(DType::f32, false);
      c.d_model = sh.C;
      c.n_layers = sh.L;
      c.n_heads = sh.NH;
      c.n_kv_heads = sh.KV;
      c.ffn_hidden = sh.F;
      c.seq_len = sh.T;
      c.head_dim = 0;
      c.tiled_attention = p.tiled;
      c.set_recompute(p.recompute);
      Transformer m(c, {sh.B, sh.T}, *be, tracker);
      const plan::ActivationBytes predicted = plan::engine_activation_bytes(
          m.config().spec(), sh.B, sh.T, m.config().activation_policy(), 4, 4);
      EXPECT_EQ(tracker.current(MemoryCategory::activations),
                static_cast<size_t>(predicted.total()))
          << "C " << sh.C << " " << p.recompute << " tiled " << p.tiled;
    }
  }
  // Recompute saves memory: selective < none, full < selective on a long sequence.
  auto bytes = [](const char* policy) {
    ModelConfig c = tiny_config(DType::f32, false);
    c.n_layers = 8;
    c.seq_len = 64;
    c.set_recompute(policy);
    return plan::engine_activation_bytes(c.spec(), 4, 64, c.activation_policy(), 2, 4).total();
  };
  EXPECT_LT(bytes("selective"), bytes("none"));
  EXPECT_LT(bytes("full"), bytes("selective"));
  EXPECT_LT(bytes("full"), bytes("full:2"));
}
