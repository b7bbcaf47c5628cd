// Tensor (and sequence) parallel blocks under mpirun (CTest runs test_parallel with 2 and 4
// ranks: tp = the world size). One transformer block, in f64, with tp shards built from the
// parameter table (wq|wk|wv split by heads with GQA kv heads divided by tp, w_gate|w_up split by
// F with the halves aligned, wo and w_down split by their input features), against the same
// block in one process on every rank: forward output, input gradient and every weight gradient
// (each local element against the global element it shards, via global_element_index) to 1e-12
// relative, for SP off and on and each recompute policy. The tp group's counters hold exactly
// the bytes of parallel/tensor_comm.h per layer and micro-batch: without SP 2 all-reduces of
// N·C forward and 2 backward, with SP the same volume as 4 all-gathers + 4 reduce-scatters. An
// MLA block (model/mla.h) is checked the same way, with and without query compression.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/block.h"
#include "core/philox.h"
#include "model/parameters.h"
#include "../comm/mpi_env.h"
#include "plan/parameter_table.h"

namespace trillion {
namespace {

// The binary's MPI environment is registered once, in engine_test.cpp.

// mla: multi-head latent attention with query latent rank q_lora_rank (< 0: GQA).
ModelConfig tp_config(int64_t q_lora_rank = -1) {
  ModelConfig c;
  c.vocab_size = 32;
  c.d_model = 16;
  c.n_layers = 1;
  c.n_heads = 8;
  c.n_kv_heads = 4;  // GQA: 2 query heads per kv head; tp 4 leaves 1 kv head per rank
  c.ffn_hidden = 24;
  c.seq_len = 8;
  c.init_std = 0.3;
  c.dtype = DType::f64;
  if (q_lora_rank >= 0) {
    c.n_kv_heads = 0;
    c.mla = true;
    // v_head_dim 6 != the qk head dim 8
    c.mla_dims = {q_lora_rank, /*kv_lora_rank=*/8, /*qk_nope=*/4, /*qk_rope=*/4, /*v=*/6};
  }
  c.validate();
  return c;
}

std::vector<double> random_values(int64_t n, uint64_t seed) {
  Philox rng(seed, "tp-test");
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = rng.normal(i);
  return v;
}

// Everything one block needs to run forward and backward: buffers carved as the stage does.
struct BlockRun {
  BlockRun(const ModelConfig& cfg, const ParallelContext& ctx, const TensorTable& table,
           const ShardCoord& coord, Backend& be, MemoryTracker& tracker, LayerRecompute r)
      : params(table, coord, DType::f64, be, tracker),
        block(be, ctx, cfg.norm_eps, cfg.tiled_attention, {4, 4}, nullptr,
              cfg.mla ? &cfg.mla_dims : nullptr),
        recompute(r) {
    params.init(11);
    params.zero_grad();
    auto at = [&](const char* name, bool grads) {
      const int i = params.table().index(std::string("layers.0.") + name);
      return grads ? params.grad(i) : params.param(i);
    };
    const int64_t C = cfg.d_model;
    for (bool grads : {false, true}) {
      BlockWeights& w = grads ? d : p;
      w.attn_norm = at("attn_norm", grads);
      if (cfg.mla) {
        const bool q_latent = cfg.mla_dims.q_lora_rank > 0;
        if (q_latent) {
          w.mla.wq_a = at("attn.wq_a", grads);
          w.mla.q_norm = at("attn.q_norm", grads);
        }
        w.mla.wq = at(q_latent ? "attn.wq_b" : "attn.wq", grads);
        w.mla.wkv_a = at("attn.wkv_a", grads);
        w.mla.kv_norm = at("attn.kv_norm", grads);
        w.mla.wkv_b = at("attn.wkv_b", grads);
        w.mla.wo = at("attn.wo", grads);
      } else {
        w.attn.wqkv = Tensor(at("attn.wq", grads).raw(), DType::f64, {ctx.shape.qkv_width(), C});
        w.attn.wo = at("attn.wo", grads);
      }
      w.mlp_norm = at("mlp_norm", grads);
      w.mlp.w_gate_up = Tensor(at("mlp.w_gate", grads).raw(), DType::f64, {2 * ctx.shape.ffn, C});
      w.mlp.w_down = at("mlp.w_down", grads);
    }
    Carver count_kept, count_shared, count_stash, count_scratch;
    block.carve(count_kept, count_shared, r);
    block.carve_stash(count_stash);
    block.carve_scratch(count_scratch);
    const int64_t N = ctx.residual_tokens();
    kept = Buffer(tracker, MemoryCategory::activations, DType::f64, count_kept.used() + N * C);
    shared = Buffer(tracker, MemoryCategory::workspace, DType::f64, count_shared.used());
    stash = Buffer(tracker, MemoryCategory::workspace, DType::f64, count_stash.used());
    scratch = Buffer(tracker, MemoryCategory::workspace, DType::f64, count_scratch.used());
    Carver k(kept), s(shared), g(stash), t(scratch);
    a = block.carve(k, s, r);
    a.x = k.take({N, C});
    st = block.carve_stash(g);
    sc = block.carve_scratch(t);
    // RoPE table as the stage builds it.
    const int64_t T = ctx.shape.seq, HD = ctx.shape.rope_dim, half = HD / 2;
    cos_sin.assign(T * HD, 0.0);
    for (int64_t pos = 0; pos < T; ++pos) {
      for (int64_t i = 0; i < half; ++i) {
        const double angle = pos * std::pow(cfg.rope_theta, -2.0 * static_cast<double>(i) / HD);
        cos_sin[pos * HD + i] = std::cos(angle);
        cos_sin[pos * HD + half + i] = std::sin(angle);
      }
    }
    cs = Tensor(cos_sin.data(), DType::f64, {T, HD});
  }
  // x, dout: this rank's residual rows. Returns out; dout becomes dL/dx.
  void run(const double* x, std::vector<double>& dout, std::vector<double>& out) {
    const int64_t n = a.x.numel();
    std::copy(x, x + n, static_cast<double*>(a.x.raw()));
    block.forward(p, a, cs);
    out.assign(static_cast<double*>(a.out.raw()), static_cast<double*>(a.out.raw()) + n);
    if (recompute != LayerRecompute::none) block.recompute(p, a, cs, recompute);
    Tensor dres(dout.data(), DType::f64, {a.x.size(0), a.x.size(1)});
    block.backward_input(dres, p, a, st, sc, cs);
    block.backward_weight(d, a, st);
  }

  ParameterSet params;
  Block block;
  LayerRecompute recompute;
  BlockWeights p, d;
  Buffer kept, shared, stash, scratch;
  BlockActivations a;
  BlockStash st;
  BlockScratch sc;
  std::vector<double> cos_sin;
  Tensor cs;
};

double rel_diff(const double* a, const double* b, int64_t n) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / std::max(scale, 1e-300);
}

void check_block(bool sp, LayerRecompute recompute, int64_t mla_q_lora_rank = -1) {
  comm::Communicator& world = *testing::mpi_world();
  const int tp = world.size(), rank = world.rank();
  const ModelConfig cfg = tp_config(mla_q_lora_rank);
  const int64_t B = 2, T = cfg.seq_len, N = B * T, C = cfg.d_model;
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const TensorTable global = plan::parameter_table(cfg.spec(), DType::f64);
  auto layer0 = [](int unit) { return unit == 1; };

  // The one-process reference, on every rank.
  const ParallelContext one = ParallelContext::single(cfg, B, T);
  BlockRun ref(cfg, one, global.local(layer0, ShardCoord{}), ShardCoord{}, *be, tracker,
               recompute);
  const std::vector<double> x = random_values(N * C, 1), dout = random_values(N * C, 2);
  std::vector<double> ref_out, ref_dx = dout;
  ref.run(x.data(), ref_dx, ref_out);

  // The tp run: this rank's shards, this rank's rows under SP.
  ParallelContext ctx;
  ctx.shape = local_shape(cfg, B, T, ShardDegrees{tp, 1, 1});
  ctx.degrees = ShardDegrees{tp, 1, 1};
  ctx.shard = ShardCoord{tp, rank, 1, 0};
  ctx.tp = &world;
  ctx.sp = sp;
  const TensorTable local = global.local(layer0, ctx.shard);
  BlockRun run(cfg, ctx, local, ctx.shard, *be, tracker, recompute);
  const int64_t rows = ctx.residual_tokens(), first = sp ? rank * rows : 0;
  std::vector<double> out, dx(dout.begin() + first * C, dout.begin() + (first + rows) * C);
  const comm::CommCounters before = world.counters();
  run.run(x.data() + first * C, dx, out);
  const comm::CommCounters used = world.counters() - before;
  reduce_replicated_gradients(ctx, run.d);

  EXPECT_LT(rel_diff(out.data(), ref_out.data() + first * C, rows * C), 1e-12) << "output";
  EXPECT_LT(rel_diff(dx.data(), ref_dx.data() + first * C, rows * C), 1e-12) << "dL/dx";
  const auto* g_ref = static_cast<const double*>(ref.params.gradients().raw());
  const auto* g_tp = static_cast<const double*>(run.params.gradients().raw());
  const auto* p_ref = static_cast<const double*>(ref.params.parameters().raw());
  const auto* p_tp = static_cast<const double*>(run.params.parameters().raw());
  const TensorTable& ref_table = ref.params.table();
  for (const TensorSpec& spec : local.specs()) {
    const int64_t base = ref_table.spec(ref_table.index(spec.name)).offset;
    std::vector<double> want(spec.numel()), init(spec.numel());
    for (int64_t k = 0; k < spec.numel(); ++k) {
      const int64_t g = base + global_element_index(spec, ctx.shard, k);
      want[k] = g_ref[g];
      init[k] = p_ref[g];
    }
    ASSERT_EQ(rel_diff(p_tp + spec.offset, init.data(), spec.numel()), 0.0) << spec.name;
    EXPECT_LT(rel_diff(g_tp + spec.offset, want.data(), spec.numel()), 1e-12) << spec.name;
  }

  if (recompute != LayerRecompute::none) return;  // recompute re-runs forward communication
  // Bytes over tp per layer and micro-batch (ring volumes, comm/communicator.h).
  const uint64_t NC = static_cast<uint64_t>(N * C) * sizeof(double), n = tp;
  using comm::Collective;
  if (!sp) {
    EXPECT_EQ(used.count(Collective::all_reduce), 4u);
    EXPECT_EQ(used.sent(Collective::all_reduce), 4 * 2 * (n - 1) * NC / n);
    EXPECT_EQ(used.total_sent(), 4 * 2 * (n - 1) * NC / n);
  } else {
    EXPECT_EQ(used.count(Collective::all_gather), 4u);
    EXPECT_EQ(used.count(Collective::reduce_scatter), 4u);
    EXPECT_EQ(used.sent(Collective::all_gather), 4 * (n - 1) * NC / n);
    EXPECT_EQ(used.sent(Collective::reduce_scatter), 4 * (n - 1) * NC / n);
    EXPECT_EQ(used.total_sent(), 4 * 2 * (n - 1) * NC / n);  // the same volume as without SP
  }
  EXPECT_EQ(used.total_received(), used.total_sent());
}

TEST(MpiTensorParallel, BlockMatchesOneProcess) {
  REQUIRE_MPI(2);
  check_block(false, LayerRecompute::none);
}
TEST(MpiTensorParallel, SequenceParallelBlockMatchesOneProcess) {
  REQUIRE_MPI(2);
  check_block(true, LayerRecompute::none);
}
// MLA: heads sharded (wq_b / wq and wkv_b column-parallel, wo row-parallel), the down-projections
// and latent norms replicated with their gradients summed over tp by reduce_replicated_gradients.
TEST(MpiTensorParallel, MlaBlockMatchesOneProcess) {
  REQUIRE_MPI(2);
  for (int64_t q_lora : {int64_t{0}, int64_t{12}}) {
    for (bool sp : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "sp " << sp << " q_lora_rank " << q_lora);
      check_block(sp, LayerRecompute::none, q_lora);
    }
  }
  check_block(true, LayerRecompute::selective, 12);
  check_block(false, LayerRecompute::full, 12);
  check_block(false, LayerRecompute::norm_up, 12);
}
TEST(MpiTensorParallel, RecomputePoliciesMatchOneProcess) {
  REQUIRE_MPI(2);
  for (bool sp : {false, true}) {
    for (LayerRecompute r : {LayerRecompute::selective, LayerRecompute::full}) {
      SCOPED_TRACE(::testing::Message() << "sp " << sp << " recompute " << static_cast<int>(r));
      check_block(sp, r);
    }
  }
}

}  // namespace
}  // namespace trillion
