// See attention.h. Linear layers are y[N, O] = x[N, I] W[O, I]^T; their dgrad is dx = dy W and
// their wgrad dW += dy^T x.
#include "model/attention.h"

#include "core/error.h"
#include "model/linear_gemm.h"

namespace trillion {

void ContextAttention::forward_latent(Tensor, Tensor, const Tensor&, const Tensor&, const Tensor&,
                                      const LatentKeys&, const DocumentMask&) {
  throw Error("this context attention does not ring over MLA's latent");
}

void ContextAttention::backward_latent(Tensor, Tensor, Tensor, const Tensor&, const Tensor&,
                                       const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                       const LatentKeys&, const DocumentMask&) {
  throw Error("this context attention does not ring over MLA's latent");
}

using precision::GemmPass;

AttentionActivations Attention::carve(Carver& kept, Carver& core) const {
  const LocalShape& s = ctx_.shape;
  const int64_t N = s.tokens();
  AttentionActivations a;
  a.qkv = kept.take({N, s.qkv_width()});
  a.state =
      tiled_ ? core.take({s.batch, s.heads, s.seq}) : core.take({s.batch, s.heads, s.seq, s.seq});
  a.heads = core.take({N, s.attention_width()});
  return a;
}

AttentionStash Attention::carve_stash(Carver& c) const {
  return {c.take({ctx_.shape.tokens(), ctx_.shape.qkv_width()})};
}

Tensor Attention::carve_scratch(Carver& c) const {
  return c.take({ctx_.shape.tokens(), ctx_.shape.attention_width()});
}

namespace {
AttentionShape masked(AttentionShape s, const DocumentMask& documents) {
  s.documents = documents;
  return s;
}
}  // namespace

void Attention::recompute_core(const AttentionActivations& a) {
  const AttentionShape s = masked(ctx_.shape.attention(), a.documents);
  if (ctx_.context_attention != nullptr) {
    ctx_.context_attention->forward(a.heads, a.state, a.qkv, a.documents);
  } else if (tiled_) {
    be_.flash_attention_forward(a.heads, a.state, a.qkv, s, blocks_);
  } else {
    be_.attention_forward(a.heads, a.state, a.qkv, s);
  }
}

void Attention::forward(Tensor out, const Tensor& x, const AttentionWeights& w,
                        const AttentionActivations& a, const Tensor& cos_sin) {
  linear_gemm(ctx_, w.layer, be_, GemmPass::forward, a.qkv, false, true, x, w.wqkv, 1.0, 0.0);
  be_.rope_forward(a.qkv, cos_sin, masked(ctx_.shape.attention(), a.documents));
  recompute_core(a);
  linear_gemm(ctx_, w.layer, be_, GemmPass::forward, out, false, true, a.heads, w.wo, 1.0, 1.0);
}

void Attention::backward_input(Tensor dx, const Tensor& dout, const AttentionWeights& w,
                               const AttentionActivations& a, const AttentionStash& g,
                               const Tensor& d_heads, const Tensor& cos_sin) {
  const AttentionShape s = masked(ctx_.shape.attention(), a.documents);
  linear_gemm(ctx_, w.layer, be_, GemmPass::dgrad, d_heads, false, false, dout, w.wo, 1.0, 0.0);
  if (ctx_.context_attention != nullptr) {
    ctx_.context_attention->backward(g.d_qkv, d_heads, a.heads, a.qkv, a.state, a.documents);
  } else if (tiled_) {
    be_.flash_attention_backward(g.d_qkv, d_heads, a.heads, a.qkv, a.state, s, blocks_);
  } else {
    be_.attention_backward(g.d_qkv, d_heads, a.qkv, a.state, s);
  }
  be_.rope_backward(g.d_qkv, cos_sin, s);
  linear_gemm(ctx_, w.layer, be_, GemmPass::dgrad, dx, false, false, g.d_qkv, w.wqkv, 1.0, 0.0);
}

void Attention::backward_weight(const AttentionWeights& d, const Tensor& x, const Tensor& dout,
                                const AttentionActivations& a, const AttentionStash& g) {
  linear_gemm(ctx_, d.layer, be_, GemmPass::wgrad, d.wo, true, false, dout, a.heads, 1.0, 1.0);
  linear_gemm(ctx_, d.layer, be_, GemmPass::wgrad, d.wqkv, true, false, g.d_qkv, x, 1.0, 1.0);
}

}  // namespace trillion
