// See block.h. Linear layers are y[N, O] = x[N, I] W[O, I]^T; their dgrad is dx = dy W and their
// wgrad dW += dy^T x.
#include "model/block.h"

namespace trillion {

BlockActivations BlockActivations::carve(Carver& kept, Carver& shared, LayerRecompute r,
                                         const AttentionShape& s, int64_t C, int64_t F,
                                         bool tiled) {
  const int64_t N = s.B * s.T;
  Carver& base = r == LayerRecompute::full ? shared : kept;  // full keeps only out
  Carver& core = r == LayerRecompute::none ? kept : shared;  // attention core, act
  BlockActivations a;
  a.norm1 = base.take({N, C});
  a.rstd1 = base.take({N});
  a.qkv = base.take({N, s.qkv_width()});
  a.attn_state = tiled ? core.take({s.B, s.NH, s.T}) : core.take({s.B, s.NH, s.T, s.T});
  a.attn = core.take({N, s.NH * s.HD});
  a.mid = base.take({N, C});
  a.norm2 = base.take({N, C});
  a.rstd2 = base.take({N});
  a.gate_up = base.take({N, 2 * F});
  a.act = core.take({N, F});
  a.out = kept.take({N, C});
  return a;
}

BlockStash BlockStash::carve(Carver& c, const AttentionShape& s, int64_t C, int64_t F) {
  const int64_t N = s.B * s.T;
  BlockStash g;
  g.d_out = c.take({N, C});
  g.d_gate_up = c.take({N, 2 * F});
  g.d_norm2 = c.take({N, C});
  g.d_mid = c.take({N, C});
  g.d_qkv = c.take({N, s.qkv_width()});
  g.d_norm1 = c.take({N, C});
  return g;
}

BlockScratch BlockScratch::carve(Carver& c, const AttentionShape& s, int64_t C, int64_t F) {
  const int64_t N = s.B * s.T;
  BlockScratch t;
  t.d_act = c.take({N, F});
  t.d_attn = c.take({N, s.NH * s.HD});
  return t;
}

void TransformerBlock::attention_core(const BlockActivations& a) {
  if (tiled_) {
    be_.flash_attention_forward(a.attn, a.attn_state, a.qkv, s_, blocks_);
  } else {
    be_.attention_forward(a.attn, a.attn_state, a.qkv, s_);
  }
}

void TransformerBlock::recompute(const BlockWeights& w, const BlockActivations& a,
                                 const Tensor& cos_sin, LayerRecompute r) {
  if (r == LayerRecompute::full) {
    forward(w, a, cos_sin, /*write_out=*/false);
  } else if (r == LayerRecompute::selective) {
    attention_core(a);
    be_.swiglu_forward(a.act, a.gate_up);
  }
}

void TransformerBlock::forward(const BlockWeights& w, const BlockActivations& a,
                               const Tensor& cos_sin, bool write_out) {
  // Attention half: mid = x + Wo · attention(rope(Wqkv · rmsnorm(x)))
  be_.rmsnorm_forward(a.norm1, a.rstd1, a.x, w.attn_norm, eps_);
  be_.gemm(a.qkv, false, true, a.norm1, w.wqkv, 1.0, 0.0);
  be_.rope_forward(a.qkv, cos_sin, s_);
  attention_core(a);
  be_.copy(a.mid, a.x);
  be_.gemm(a.mid, false, true, a.attn, w.wo, 1.0, 1.0);
  // MLP half: out = mid + Wdown · swiglu(Wgu · rmsnorm(mid))
  be_.rmsnorm_forward(a.norm2, a.rstd2, a.mid, w.mlp_norm, eps_);
  be_.gemm(a.gate_up, false, true, a.norm2, w.w_gate_up, 1.0, 0.0);
  be_.swiglu_forward(a.act, a.gate_up);
  if (!write_out) return;
  be_.copy(a.out, a.mid);
  be_.gemm(a.out, false, true, a.act, w.w_down, 1.0, 1.0);
}

void TransformerBlock::backward_input(Tensor dres, const BlockWeights& w, const BlockActivations& a,
                                      const BlockStash& g, const BlockScratch& t,
                                      const Tensor& cos_sin) {
  // MLP half, in reverse. dres holds dL/d(out); the residual passes it through to mid.
  be_.copy(g.d_out, dres);
  be_.gemm(t.d_act, false, false, dres, w.w_down, 1.0, 0.0);
  be_.swiglu_backward(g.d_gate_up, t.d_act, a.gate_up);
  be_.gemm(g.d_norm2, false, false, g.d_gate_up, w.w_gate_up, 1.0, 0.0);
  be_.rmsnorm_backward_input(dres, g.d_norm2, a.mid, w.mlp_norm, a.rstd2);
  // Attention half. dres now holds dL/d(mid).
  be_.copy(g.d_mid, dres);
  be_.gemm(t.d_attn, false, false, dres, w.wo, 1.0, 0.0);
  if (tiled_) {
    be_.flash_attention_backward(g.d_qkv, t.d_attn, a.attn, a.qkv, a.attn_state, s_, blocks_);
  } else {
    be_.attention_backward(g.d_qkv, t.d_attn, a.qkv, a.attn_state, s_);
  }
  be_.rope_backward(g.d_qkv, cos_sin, s_);
  be_.gemm(g.d_norm1, false, false, g.d_qkv, w.wqkv, 1.0, 0.0);
  be_.rmsnorm_backward_input(dres, g.d_norm1, a.x, w.attn_norm, a.rstd1);
}

void TransformerBlock::backward_weight(const BlockWeights& d, const BlockActivations& a,
                                       const BlockStash& g) {
  be_.gemm(d.w_down, true, false, g.d_out, a.act, 1.0, 1.0);
  be_.gemm(d.w_gate_up, true, false, g.d_gate_up, a.norm2, 1.0, 1.0);
  be_.rmsnorm_backward_weight(d.mlp_norm, g.d_norm2, a.mid, a.rstd2);
  be_.gemm(d.wo, true, false, g.d_mid, a.attn, 1.0, 1.0);
  be_.gemm(d.wqkv, true, false, g.d_qkv, a.norm1, 1.0, 1.0);
  be_.rmsnorm_backward_weight(d.attn_norm, g.d_norm1, a.x, a.rstd1);
}

}  // namespace trillion
