// See block.h.
#include "model/block.h"

#include "core/error.h"
#include "parallel/tensor_comm.h"

namespace trillion {

BlockActivations Block::carve(Carver& kept, Carver& shared, LayerRecompute r, MoeState* moe) const {
  const int64_t N = ctx_.residual_tokens(), C = ctx_.shape.d_model;
  const bool sp = ctx_.sequence_parallel();
  const bool norm_up = r == LayerRecompute::norm_up;
  TRILLION_CHECK(!(norm_up && sp), "norm-up recompute does not run under sequence parallelism");
  Carver& base = r == LayerRecompute::full ? shared : kept;  // full keeps only out
  // The attention core and the SwiGLU output.
  Carver& core = r == LayerRecompute::none || norm_up ? kept : shared;
  Carver& normed = norm_up ? shared : base;  // the norm outputs (and MLA's up-projections)
  BlockActivations a;
  a.norm1 = normed.take({N, C});
  a.rstd1 = base.take({N});
  if (sp) a.norm1_full = base.take({ctx_.shape.tokens(), C});
  // MLA's core has the same shapes (LocalShape); norm-up recomputes its qkv.
  a.attn = attention_.carve(mla_ ? normed : base, core);
  if (mla_) a.mla = mla_->carve(base, normed, norm_up);
  a.mid = base.take({N, C});
  a.norm2 = normed.take({N, C});
  a.rstd2 = base.take({N});
  if (sp) a.norm2_full = base.take({ctx_.shape.tokens(), C});
  if (moe != nullptr) {
    TRILLION_CHECK(ctx_.tp_size() == 1 || ctx_.moe_slice || ctx_.experts_tp,
                   "MoE layers under tensor parallelism need parallel.expert_tp");
    // Full recompute reruns the whole layer, routing and expert exchange included (tp = 1 only:
    // the tp paths below write the layer's output as they go).
    TRILLION_CHECK(r != LayerRecompute::full || ctx_.tp_size() == 1,
                   "a MoE layer is fully recomputed only without tensor parallelism");
    TRILLION_CHECK(moe_ != nullptr, "a MoE layer in a block without a MoE module");
    a.moe = moe;
    moe_->carve(base, *moe);
  } else {
    a.mlp = mlp_.carve(base, core);
  }
  a.out = kept.take({N, C});
  if (sp) a.partial = shared.take({ctx_.shape.tokens(), C});
  return a;
}

BlockStash Block::carve_stash(Carver& c) const {
  const int64_t N = ctx_.shape.tokens(), Nr = ctx_.residual_tokens(), C = ctx_.shape.d_model;
  BlockStash g;
  g.d_out = c.take({N, C});
  g.mlp = mlp_.carve_stash(c);
  g.d_norm2 = c.take({Nr, C});
  g.d_mid = c.take({N, C});
  g.attn = attention_.carve_stash(c);
  if (mla_) g.mla = mla_->carve_stash(c);
  g.d_norm1 = c.take({Nr, C});
  return g;
}

BlockScratch Block::carve_scratch(Carver& c) const {
  BlockScratch t;
  t.d_act = mlp_.carve_scratch(c);
  t.d_heads = attention_.carve_scratch(c);
  return t;
}

void Block::recompute(const BlockWeights& w, const BlockActivations& a, const Tensor& cos_sin,
                      LayerRecompute r) {
  if (r == LayerRecompute::full) {
    forward(w, a, cos_sin, /*write_out=*/false);
  } else if (r == LayerRecompute::norm_up) {
    be_.rmsnorm_forward(a.norm1, a.rstd1, a.x, w.attn_norm, eps_);
    if (mla_) mla_->recompute_up(a.norm1, w.mla, a.mla, a.attn, cos_sin);
    be_.rmsnorm_forward(a.norm2, a.rstd2, a.mid, w.mlp_norm, eps_);
  } else if (r == LayerRecompute::selective) {
    if (mla_) {
      mla_->recompute_core(a.attn, w.mla, a.mla);
    } else {
      attention_.recompute_core(a.attn);
    }
    if (a.moe == nullptr) mlp_.recompute_core(a.mlp);
  }
}

template <typename PartialInto>
void Block::residual_exit(const Tensor& out, const Tensor& residual, const Tensor& partial,
                          PartialInto partial_into) {
  comm::Communicator* tp = ctx_.tp;
  if (ctx_.tp_size() == 1) {
    be_.copy(out, residual);
    partial_into(out);
  } else if (!ctx_.sequence_parallel()) {
    // The residual enters the sum once (on tp rank 0): out = x + sum_r partial_r.
    if (ctx_.tp_rank() == 0) {
      be_.copy(out, residual);
    } else {
      be_.fill(out, 0.0);
    }
    partial_into(out);
    parallel::reduce_from_tp_forward(tp, out);
  } else {
    // Rank r's residual rows enter chunk r of the partial once; the reduce-scatter sums them.
    const int64_t rows = ctx_.residual_tokens(), r = ctx_.tp_rank();
    be_.fill(partial, 0.0);
    be_.copy(partial.rows(r * rows, (r + 1) * rows), residual);
    partial_into(partial);
    parallel::reduce_scatter_sp_forward(tp, partial, out);
  }
}

void Block::forward(const BlockWeights& w, const BlockActivations& a, const Tensor& cos_sin,
                    bool write_out) {
  // Attention half: mid = x + Attention(rmsnorm(x))
  // Attention half: mid = x + Attention(rmsnorm(x))
  const bool sp = ctx_.sequence_parallel();
  be_.rmsnorm_forward(a.norm1, a.rstd1, a.x, w.attn_norm, eps_);
  const Tensor& attn_in = sp ? a.norm1_full : a.norm1;
  if (sp) parallel::all_gather_sp_forward(ctx_.tp, a.norm1, a.norm1_full);
  residual_exit(a.mid, a.x, a.partial, [&](const Tensor& out) {
    if (mla_) {
      mla_->forward(out, attn_in, w.mla, a.mla, a.attn, cos_sin);
    } else {
      attention_.forward(out, attn_in, w.attn, a.attn, cos_sin);
    }
  });
  // MLP half: out = mid + Mlp(rmsnorm(mid))
  be_.rmsnorm_forward(a.norm2, a.rstd2, a.mid, w.mlp_norm, eps_);
  if (a.moe != nullptr && ctx_.moe_slice) {
    TRILLION_CHECK(write_out, "a MoE layer cannot be fully recomputed");
    moe_slice_forward(w, a);
    return;
  }
  const Tensor& mlp_in = sp ? a.norm2_full : a.norm2;
  if (sp) parallel::all_gather_sp_forward(ctx_.tp, a.norm2, a.norm2_full);
  if (a.moe != nullptr && ctx_.tp_size() == 1) {
    if (!write_out) return moe_->recompute(a.norm2, w.moe, *a.moe);
    be_.copy(a.out, a.mid);
    moe_->forward(a.out, a.norm2, w.moe, *a.moe);
  } else if (a.moe != nullptr) {
    // Experts split over tp: the MoE layer is a tp region over the gathered rows, as the MLP.
    TRILLION_CHECK(write_out, "a MoE layer cannot be fully recomputed");
    residual_exit(a.out, a.mid, a.partial,
                  [&](const Tensor& out) { moe_->forward(out, mlp_in, w.moe, *a.moe); });
  } else if (!write_out) {
    mlp_.forward(a.out, mlp_in, w.mlp, a.mlp, /*write_out=*/false);
  } else {
    residual_exit(a.out, a.mid, a.partial,
                  [&](const Tensor& out) { mlp_.forward(out, mlp_in, w.mlp, a.mlp); });
  }
}

void Block::moe_slice_forward(const BlockWeights& w, const BlockActivations& a) {
  // out = mid + reduce_scatter(Shared(all_gather(norm2))) + Routed(norm2 rows of this rank).
  if (moe_->has_shared()) {
    parallel::all_gather_sp_forward(ctx_.tp, a.norm2, a.norm2_full);
    residual_exit(a.out, a.mid, a.partial, [&](const Tensor& out) {
      moe_->shared_forward(out, a.norm2_full, w.moe, *a.moe);
    });
  } else {
    be_.copy(a.out, a.mid);
  }
  moe_->forward(a.out, a.norm2, w.moe, *a.moe);
}

void Block::moe_slice_backward_input(const Tensor& dres, const BlockWeights& w,
                                     const BlockActivations& a, const BlockStash& g) {
  // d_norm2 = (the shared experts' gathered-and-scattered part) + the routed rows' part.
  if (moe_->has_shared()) {
    parallel::reduce_scatter_sp_backward(ctx_.tp, dres, g.d_out);
    moe_->shared_backward_input(a.partial, g.d_out, w.moe, *a.moe);
    parallel::all_gather_sp_backward(ctx_.tp, a.partial, g.d_norm2);
  } else {
    be_.fill(g.d_norm2, 0.0);
  }
  moe_->backward_input(g.d_norm2, dres, w.moe, *a.moe);
}

void Block::backward_input(Tensor dres, const BlockWeights& w, const BlockActivations& a,
                           const BlockStash& g, const BlockScratch& t, const Tensor& cos_sin) {
  // MLP half, in reverse. dres holds dL/d(out); the residual passes it through to mid.
  // Under tp each sublayer's input gradient is a partial sum over the rank's heads / columns:
  // copy_to_tp's backward sums it (SP: all_gather_sp's backward, a reduce-scatter, after
  // reduce_scatter_sp's backward gathered d_out).
  comm::Communicator* tp = ctx_.tp;
  const bool sp = ctx_.sequence_parallel();
  if (a.moe != nullptr && ctx_.moe_slice) {
    moe_slice_backward_input(dres, w, a, g);
  } else {
    if (sp) {
      parallel::reduce_scatter_sp_backward(tp, dres, g.d_out);
    } else {
      be_.copy(g.d_out, dres);
    }
    const Tensor& d_norm2_full = sp ? a.partial : g.d_norm2;
    if (a.moe != nullptr) {  // tp = 1, or experts split over tp (a tp region)
      moe_->backward_input(d_norm2_full, g.d_out, w.moe, *a.moe);
    } else {
      mlp_.backward_input(d_norm2_full, g.d_out, w.mlp, a.mlp, g.mlp, t.d_act);
    }
    if (sp) {
      parallel::all_gather_sp_backward(tp, d_norm2_full, g.d_norm2);
    } else {
      parallel::copy_to_tp_backward(tp, g.d_norm2);
    }
  }
  be_.rmsnorm_backward_input(dres, g.d_norm2, a.mid, w.mlp_norm, a.rstd2);
  // Attention half. dres now holds dL/d(mid).
  if (sp) {
    parallel::reduce_scatter_sp_backward(tp, dres, g.d_mid);
  } else {
    be_.copy(g.d_mid, dres);
  }
  const Tensor& d_norm1_full = sp ? a.partial : g.d_norm1;
  if (mla_) {
    mla_->backward_input(d_norm1_full, g.d_mid, w.mla, a.mla, a.attn, g.attn, g.mla, t.d_heads,
                         cos_sin);
  } else {
    attention_.backward_input(d_norm1_full, g.d_mid, w.attn, a.attn, g.attn, t.d_heads, cos_sin);
  }
  if (sp) {
    parallel::all_gather_sp_backward(tp, d_norm1_full, g.d_norm1);
  } else {
    parallel::copy_to_tp_backward(tp, g.d_norm1);
  }
  be_.rmsnorm_backward_input(dres, g.d_norm1, a.x, w.attn_norm, a.rstd1);
}

void Block::backward_weight(const BlockWeights& d, const BlockActivations& a, const BlockStash& g) {
  const bool sp = ctx_.sequence_parallel();
  if (a.moe != nullptr) {
    moe_->backward_weight(d.moe, sp && !ctx_.moe_slice ? a.norm2_full : a.norm2, g.d_out, *a.moe);
    if (ctx_.moe_slice) moe_->shared_backward_weight(d.moe, a.norm2_full, g.d_out, *a.moe);
  } else {
    mlp_.backward_weight(d.mlp, sp ? a.norm2_full : a.norm2, g.d_out, a.mlp, g.mlp);
  }
  be_.rmsnorm_backward_weight(d.mlp_norm, g.d_norm2, a.mid, a.rstd2);
  const Tensor& attn_in = sp ? a.norm1_full : a.norm1;
  if (mla_) {
    mla_->backward_weight(d.mla, attn_in, g.d_mid, a.mla, a.attn, g.attn, g.mla);
  } else {
    attention_.backward_weight(d.attn, attn_in, g.d_mid, a.attn, g.attn);
  }
  be_.rmsnorm_backward_weight(d.attn_norm, g.d_norm1, a.x, a.rstd1);
}

void reduce_replicated_gradients(const ParallelContext& ctx, const BlockWeights& grads) {
  if (ctx.tp_size() == 1) return;
  if (!grads.mla.wkv_a.empty()) {
    for (const Tensor& t : {grads.mla.wq_a, grads.mla.q_norm, grads.mla.wkv_a, grads.mla.kv_norm})
      if (!t.empty()) ctx.tp->all_reduce(t);
  }
  if (!ctx.sequence_parallel()) return;
  ctx.tp->all_reduce(grads.attn_norm);
  ctx.tp->all_reduce(grads.mlp_norm);
}

}  // namespace trillion
