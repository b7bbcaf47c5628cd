// Stage models: the model cut into two stages in one process (layers [0, L/2) with the
// embedding, then [L/2, L) with the head; activations and their gradients handed over in memory)
// with 1, 2 and 4 activation slots gives bitwise the losses and gradients of the one-stage model,
// fused or split backward, under every recompute policy, tied or untied; the per-stage activation
// bytes equal plan/'s formula with slots; the hooks bracket every pass; and the local shape and
// shard tables cut the model as the layout says.
#include <gtest/gtest.h>

#include <cstring>

#include "model/transformer.h"
#include "plan/activation_memory.h"
#include "plan/parameter_table.h"
#include "test_util.h"

using namespace trillion;

namespace {

ModelConfig four_layers(bool tied) {
  ModelConfig c;
  c.vocab_size = 23;
  c.d_model = 16;
  c.n_layers = 4;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 24;
  c.seq_len = 6;
  c.tied_embeddings = tied;
  c.init_std = 0.2;
  c.dtype = DType::f32;
  return c;
}

std::vector<int32_t> tokens_of(int64_t n, int64_t vocab, uint64_t seed) {
  Philox rng(seed, "tokens");
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>(rng.below(i, vocab));
  return t;
}

struct Result {
  std::vector<double> losses;  // per micro-batch
  std::vector<char> grads;     // the whole gradient buffer
};

constexpr int64_t kB = 2, kT = 6, kN = kB * kT;

// The one-stage model: micro-batches one after the other, gradients accumulated.
Result one_stage(const ModelConfig& c, int micro_batches) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  Transformer m(c, {kB, kT}, *be, tracker);
  m.init_parameters(9);
  m.zero_grad();
  Result r;
  for (int mb = 0; mb < micro_batches; ++mb) {
    const auto tok = tokens_of(kN, c.vocab_size, 100 + mb),
               tgt = tokens_of(kN, c.vocab_size, 200 + mb);
    r.losses.push_back(m.forward(tok.data(), tgt.data()) * kN);
    m.backward(1.0 / (kN * micro_batches));
  }
  const char* g = static_cast<const char*>(m.gradients().raw());
  r.grads.assign(g, g + m.gradients().bytes());
  return r;
}

// Two stages over one ParameterSet, `slots` micro-batches in flight: every forward first (GPipe
// order), then every backward; split runs all B passes, then all W passes.
Result two_stages(const ModelConfig& c, int slots, bool split, size_t* activation_bytes = nullptr,
                  plan::StageExtent* extents = nullptr) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const ParallelContext ctx = ParallelContext::single(c, kB, kT);
  ParameterSet params(build_parameter_table(c), {}, c.dtype, *be, tracker);
  const int L = static_cast<int>(c.n_layers);
  StageModel first(c, ctx, params, {0, L / 2}, {slots, split}, *be, tracker);
  StageModel second(c, ctx, params, {L / 2 + 1, L + 1}, {slots, split}, *be, tracker);
  if (extents) {
    extents[0] = first.extent();
    extents[1] = second.extent();
  }
  params.init(9);
  params.zero_grad();
  Result r;
  std::vector<std::vector<int32_t>> tok(slots), tgt(slots);
  for (int mb = 0; mb < slots; ++mb) {
    tok[mb] = tokens_of(kN, c.vocab_size, 100 + mb);
    tgt[mb] = tokens_of(kN, c.vocab_size, 200 + mb);
    first.set_tokens(mb, tok[mb].data());
    second.set_targets(mb, tgt[mb].data());
    EXPECT_EQ(first.forward(mb), 0.0);
    be->copy(second.input(mb), first.output(mb));
    r.losses.push_back(second.forward(mb));
  }
  const double scale = 1.0 / (kN * slots);
  for (int mb = 0; mb < slots; ++mb) {
    if (split) {
      second.backward_input(mb, scale);
      be->copy(first.grad(mb), second.grad(mb));
      first.backward_input(mb, scale);
    } else {
      second.backward(mb, scale);
      be->copy(first.grad(mb), second.grad(mb));
      first.backward(mb, scale);
    }
  }
  if (split) {
    for (int mb = 0; mb < slots; ++mb) {
      second.backward_weight(mb);
      first.backward_weight(mb);
    }
  }
  const char* g = static_cast<const char*>(params.gradients().raw());
  r.grads.assign(g, g + params.gradients().bytes());
  if (activation_bytes) *activation_bytes = tracker.current(MemoryCategory::activations);
  return r;
}

}  // namespace

TEST(Stages, TwoStagesInOneProcessEqualOneStageBitwise) {
  const char* policies[] = {"none", "selective", "full", "full:2", "full:3"};
  for (bool tied : {false, true}) {
    for (bool tiled : {true, false}) {
      for (const char* policy : policies) {
        ModelConfig c = four_layers(tied);
        c.tiled_attention = tiled;
        c.set_recompute(policy);
        c.validate();
        for (int slots : {1, 2, 4}) {
          const Result ref = one_stage(c, slots);
          for (bool split : {false, true}) {
            const Result got = two_stages(c, slots, split);
            const std::string what = std::string(policy) + (tiled ? " tiled" : " materialized") +
                                     (tied ? " tied" : "") + " slots " + std::to_string(slots) +
                                     (split ? " split" : " fused");
            ASSERT_EQ(got.losses.size(), ref.losses.size());
            for (size_t mb = 0; mb < ref.losses.size(); ++mb) {
              EXPECT_EQ(got.losses[mb], ref.losses[mb]) << what << " micro-batch " << mb;
            }
            ASSERT_EQ(got.grads.size(), ref.grads.size());
            EXPECT_EQ(std::memcmp(got.grads.data(), ref.grads.data(), ref.grads.size()), 0) << what;
          }
        }
      }
    }
  }
}

TEST(Stages, ActivationBytesPerStageEqualThePlanFormulaWithSlots) {
  for (const char* policy : {"none", "selective", "full", "full:3"}) {
    for (int slots : {1, 2, 4}) {
      ModelConfig c = four_layers(false);
      c.set_recompute(policy);
      c.validate();
      size_t measured = 0;
      plan::StageExtent extents[2];
      two_stages(c, slots, false, &measured, extents);
      EXPECT_EQ(extents[0].first_layer, 0);
      EXPECT_EQ(extents[0].n_layers, 2);
      EXPECT_FALSE(extents[0].has_head);
      EXPECT_EQ(extents[1].first_layer, 2);
      EXPECT_TRUE(extents[1].has_head);
      int64_t predicted = 0;
      for (const plan::StageExtent& e : extents) {
        predicted +=
            plan::engine_activation_bytes(c.spec(), kB, kT, c.activation_policy(), 4, 4, e, slots)
                .total();
      }
      EXPECT_EQ(measured, static_cast<size_t>(predicted)) << policy << " slots " << slots;
    }
  }
}

namespace {
// Records every hook call as "before/after unit pass use".
struct Recorder : UnitHooks {
  std::vector<std::string> calls;
  static const char* pass_name(Pass p) {
    switch (p) {
      case Pass::forward:
        return "F";
      case Pass::backward:
        return "BW";
      case Pass::backward_input:
        return "B";
      case Pass::backward_weight:
        return "W";
    }
    return "?";
  }
  static const char* use_name(Use u) { return u == Use::own ? "" : u == Use::borrowed ? "*" : "~"; }
  void before(int unit, Pass pass, Use use, int next) override {
    calls.push_back("+" + std::to_string(unit) + pass_name(pass) + use_name(use) + ">" +
                    std::to_string(next));
  }
  void after(int unit, Pass pass, Use use) override {
    calls.push_back("-" + std::to_string(unit) + pass_name(pass) + use_name(use));
  }
};
}  // namespace

TEST(Stages, HooksBracketEveryPassInOrderAndChainInReverse) {
  ModelConfig c = four_layers(true);
  c.n_layers = 2;
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  Transformer m(c, {kB, kT}, *be, tracker, /*split_backward=*/true);
  m.init_parameters(1);
  Recorder a, b;
  m.hooks().add(&a);
  m.hooks().add(&b);
  const auto tok = tokens_of(kN, c.vocab_size, 1);
  m.forward(tok.data(), tok.data());
  m.backward_input(1.0);
  m.backward_weight();
  // "+u P use >next": before unit u in pass P (* borrowed, ~ gradients only), next unit read.
  const std::vector<std::string> expect = {
      "+0F>1",   "-0F",     "+1F>2",  "-1F",     "+2F>3",  "-2F",     "+3F>0",
      "+0F*>-1", "-0F*",    "-3F",    "+3B>0",   "+0B*>2", "-0B*",    "-3B",
      "+2B>1",   "-2B",     "+1B>-1", "-1B",     "+3W>0",  "+0W*>-1", "-0W*",
      "-3W",     "+2W~>-1", "-2W~",   "+1W~>-1", "-1W~",   "+0W~>-1", "-0W~"};
  EXPECT_EQ(a.calls, expect);
  EXPECT_EQ(b.calls, expect);
  // In one event, `before` runs a then b and `after` runs b then a: check on a fresh pass.
  std::vector<std::string> order;
  struct Named : UnitHooks {
    std::vector<std::string>* log;
    std::string name;
    void before(int, Pass, Use, int) override { log->push_back("before " + name); }
    void after(int, Pass, Use) override { log->push_back("after " + name); }
  } x, y;
  x.log = y.log = &order;
  x.name = "x";
  y.name = "y";
  HookChain chain;
  chain.add(&x);
  chain.add(&y);
  chain.before(0, Pass::forward);
  chain.after(0, Pass::forward);
  EXPECT_EQ(order, (std::vector<std::string>{"before x", "before y", "after y", "after x"}));
}

TEST(Stages, LocalShapeDividesByTheLayoutAndNamesTheDegree) {
  ModelConfig c = four_layers(false);
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 24;
  c.vocab_size = 24;
  c.validate();
  const LocalShape s = local_shape(c, 3, 6, {.tp = 2, .cp = 3, .ep = 1});
  EXPECT_EQ(s.batch, 3);
  EXPECT_EQ(s.seq, 2);
  EXPECT_EQ(s.heads, 2);
  EXPECT_EQ(s.kv_heads, 1);
  EXPECT_EQ(s.ffn, 12);
  EXPECT_EQ(s.vocab_rows, 12);
  EXPECT_EQ(s.qkv_width(), (2 + 2) * 4);
  try {
    local_shape(c, 3, 6, {.tp = 4});
    FAIL() << "tp 4 cannot split 2 kv heads";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.tp = 4 does not divide model.n_kv_heads = 2"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(local_shape(c, 3, 6, {.cp = 4}), Error);  // 6 tokens in 4
  // The rank's table under tp 2 holds half of every column- and row-parallel matrix.
  const TensorTable global = build_parameter_table(c);
  const TensorTable half = global.local([](int) { return true; }, {2, 1, 1, 0});
  EXPECT_EQ(half.spec(half.index("layers.0.attn.wq")).shape, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(half.spec(half.index("layers.0.attn.wo")).shape, (std::vector<int64_t>{16, 8}));
  EXPECT_EQ(half.spec(half.index("layers.0.mlp_norm")).shape, (std::vector<int64_t>{16}));
}

TEST(Stages, InitOfAShardIsThatSliceOfTheWholeTensor) {
  // A tp=2 rank's shard of every tensor initialises to exactly its slice of the one-process
  // values: init is keyed by global element index, never by rank.
  ModelConfig c = four_layers(false);
  c.vocab_size = 24;
  c.validate();
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const TensorTable global = build_parameter_table(c);
  ParameterSet whole(global, {}, c.dtype, *be, tracker);
  whole.init(4);
  for (int rank = 0; rank < 2; ++rank) {
    const ShardCoord coord{2, rank, 1, 0};
    ParameterSet part(global.local([](int) { return true; }, coord), coord, c.dtype, *be, tracker);
    part.init(4);
    for (int i = 0; i < part.table().size(); ++i) {
      const TensorSpec& s = part.table().spec(i);
      const float* w = whole.param(s.name).data<float>();
      const float* p = part.param(i).data<float>();
      for (int64_t k = 0; k < s.numel(); ++k) {
        ASSERT_EQ(p[k], w[global_element_index(s, coord, k)]) << s.name << " rank " << rank;
      }
    }
  }
}
