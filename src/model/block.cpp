// See block.h.
#include "model/block.h"

#include "core/error.h"

namespace trillion {

BlockActivations Block::carve(Carver& kept, Carver& shared, LayerRecompute r, MoeState* moe) const {
  const int64_t N = ctx_.shape.tokens(), C = ctx_.shape.d_model;
  Carver& base = r == LayerRecompute::full ? shared : kept;  // full keeps only out
  Carver& core = r == LayerRecompute::none ? kept : shared;  // attention core, SwiGLU output
  BlockActivations a;
  a.norm1 = base.take({N, C});
  a.rstd1 = base.take({N});
  a.attn = attention_.carve(base, core);
  a.mid = base.take({N, C});
  a.norm2 = base.take({N, C});
  a.rstd2 = base.take({N});
  if (moe != nullptr) {
    TRILLION_CHECK(r != LayerRecompute::full, "a MoE layer cannot be fully recomputed");
    TRILLION_CHECK(moe_ != nullptr, "a MoE layer in a block without a MoE module");
    a.moe = moe;
    moe_->carve(kept, *moe);
  } else {
    a.mlp = mlp_.carve(base, core);
  }
  a.out = kept.take({N, C});
  return a;
}

BlockStash Block::carve_stash(Carver& c) const {
  const int64_t N = ctx_.shape.tokens(), C = ctx_.shape.d_model;
  BlockStash g;
  g.d_out = c.take({N, C});
  g.mlp = mlp_.carve_stash(c);
  g.d_norm2 = c.take({N, C});
  g.d_mid = c.take({N, C});
  g.attn = attention_.carve_stash(c);
  g.d_norm1 = c.take({N, C});
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
  } else if (r == LayerRecompute::selective) {
    attention_.recompute_core(a.attn);
    if (a.moe == nullptr) mlp_.recompute_core(a.mlp);
  }
}

void Block::forward(const BlockWeights& w, const BlockActivations& a, const Tensor& cos_sin,
                    bool write_out) {
  // Attention half: mid = x + Attention(rmsnorm(x))
  be_.rmsnorm_forward(a.norm1, a.rstd1, a.x, w.attn_norm, eps_);
  be_.copy(a.mid, a.x);
  attention_.forward(a.mid, a.norm1, w.attn, a.attn, cos_sin);
  // MLP half: out = mid + Mlp(rmsnorm(mid))
  be_.rmsnorm_forward(a.norm2, a.rstd2, a.mid, w.mlp_norm, eps_);
  if (write_out) be_.copy(a.out, a.mid);
  if (a.moe != nullptr) {
    moe_->forward(a.out, a.norm2, w.moe, *a.moe);
  } else {
    mlp_.forward(a.out, a.norm2, w.mlp, a.mlp, write_out);
  }
}

void Block::backward_input(Tensor dres, const BlockWeights& w, const BlockActivations& a,
                           const BlockStash& g, const BlockScratch& t, const Tensor& cos_sin) {
  // MLP half, in reverse. dres holds dL/d(out); the residual passes it through to mid.
  be_.copy(g.d_out, dres);
  if (a.moe != nullptr) {
    moe_->backward_input(g.d_norm2, dres, w.moe, *a.moe);
  } else {
    mlp_.backward_input(g.d_norm2, dres, w.mlp, a.mlp, g.mlp, t.d_act);
  }
  be_.rmsnorm_backward_input(dres, g.d_norm2, a.mid, w.mlp_norm, a.rstd2);
  // Attention half. dres now holds dL/d(mid).
  be_.copy(g.d_mid, dres);
  attention_.backward_input(g.d_norm1, dres, w.attn, a.attn, g.attn, t.d_heads, cos_sin);
  be_.rmsnorm_backward_input(dres, g.d_norm1, a.x, w.attn_norm, a.rstd1);
}

void Block::backward_weight(const BlockWeights& d, const BlockActivations& a, const BlockStash& g) {
  if (a.moe != nullptr) {
    moe_->backward_weight(d.moe, a.norm2, g.d_out, *a.moe);
  } else {
    mlp_.backward_weight(d.mlp, a.norm2, g.d_out, a.mlp, g.mlp);
  }
  be_.rmsnorm_backward_weight(d.mlp_norm, g.d_norm2, a.mid, a.rstd2);
  attention_.backward_weight(d.attn, a.norm1, g.d_mid, a.attn, g.attn);
  be_.rmsnorm_backward_weight(d.attn_norm, g.d_norm1, a.x, a.rstd1);
}

}  // namespace trillion
