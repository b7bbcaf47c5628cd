// See mla.h. Linear layers are y[N, O] = x[N, I] W[O, I]^T; their dgrad is dx = dy W and their
// wgrad dW += dy^T x. Column views of the qkv buffer keep its row stride, so the per-head GEMMs
// write keys and values straight into their places in the core's input.
#include "model/mla.h"

#include "core/error.h"
#include "model/linear_gemm.h"

namespace trillion {

using precision::GemmPass;

namespace {
AttentionShape masked(AttentionShape s, const DocumentMask& documents) {
  s.documents = documents;
  return s;
}
}  // namespace

MlaActivations Mla::carve(Carver& kept, Carver& normed, bool norm_up) const {
  const int64_t N = ctx_.shape.tokens();
  MlaActivations a;
  if (d_.q_lora_rank > 0) {
    a.cq = kept.take({N, d_.q_lora_rank});
    a.rstd_q = kept.take({N});
    a.cq_norm = normed.take({N, d_.q_lora_rank});
  }
  a.ckv = kept.take({N, d_.kv_lora_rank});
  a.rstd_kv = kept.take({N});
  a.ckv_norm = normed.take({N, d_.kv_lora_rank});
  if (norm_up) a.k_rope = kept.take({N, d_.qk_rope_head_dim});
  return a;
}

MlaStash Mla::carve_stash(Carver& c) const {
  const int64_t N = ctx_.shape.tokens();
  MlaStash g;
  g.d_ckv = c.take({N, d_.kv_lora_rank});
  g.d_ckv_norm = c.take({N, d_.kv_lora_rank});
  g.d_k_rope = c.take({N, d_.qk_rope_head_dim});
  if (d_.q_lora_rank > 0) {
    g.d_cq = c.take({N, d_.q_lora_rank});
    g.d_cq_norm = c.take({N, d_.q_lora_rank});
  }
  if (latent_ring() != nullptr) {
    g.d_wkv_b = c.take({ctx_.shape.heads * (d_.qk_nope_head_dim + d_.v_head_dim), d_.kv_lora_rank});
  }
  return g;
}

ContextAttention* Mla::latent_ring() const {
  ContextAttention* ring = ctx_.context_attention;
  return ring != nullptr && ring->latent_width() > 0 ? ring : nullptr;
}

ContextAttention::LatentKeys Mla::latent_keys(const MlaWeights& w, const Tensor& d_wkv_b) {
  const int64_t NH = ctx_.shape.heads, HD = qk(), DN = d_.qk_nope_head_dim;
  const int64_t VD = d_.v_head_dim, DC = d_.kv_lora_rank, L = DC + d_.qk_rope_head_dim;
  const int64_t value0 = NH * HD;  // in a K | V block
  ContextAttention::LatentKeys keys;
  // kv [N, K | V] from latent [N, DC | DR]: as up_project, per head, and the shared rotated key.
  keys.up = [=, this](const Tensor& latent, const Tensor& kv) {
    const Tensor c = latent.columns(0, DC), rope = latent.columns(DC, L);
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t r = h * (DN + VD);
      linear_gemm(ctx_, w.layer, be_, GemmPass::forward, kv.columns(h * HD, h * HD + DN), false,
                  true, c, w.wkv_b.rows(r, r + DN), 1.0, 0.0);
      linear_gemm(ctx_, w.layer, be_, GemmPass::forward,
                  kv.columns(value0 + h * VD, value0 + (h + 1) * VD), false, true, c,
                  w.wkv_b.rows(r + DN, r + DN + VD), 1.0, 0.0);
      be_.copy(kv.columns(h * HD + DN, (h + 1) * HD), rope);
    }
  };
  // d_latent = (sum_h dk_nope_h Wk_h + dv_h Wv_h | sum_h dk_rope_h); d_wkv_b += dkv_h^T c.
  keys.down = [=, this](const Tensor& dkv, const Tensor& latent, const Tensor& d_latent) {
    const Tensor c = latent.columns(0, DC), dc = d_latent.columns(0, DC);
    const Tensor d_rope = d_latent.columns(DC, L);
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t r = h * (DN + VD);
      const Tensor dk = dkv.columns(h * HD, h * HD + DN);
      const Tensor dv = dkv.columns(value0 + h * VD, value0 + (h + 1) * VD);
      linear_gemm(ctx_, w.layer, be_, GemmPass::dgrad, dc, false, false, dk,
                  w.wkv_b.rows(r, r + DN), 1.0, h == 0 ? 0.0 : 1.0);
      linear_gemm(ctx_, w.layer, be_, GemmPass::dgrad, dc, false, false, dv,
                  w.wkv_b.rows(r + DN, r + DN + VD), 1.0, 1.0);
      linear_gemm(ctx_, w.layer, be_, GemmPass::wgrad, d_wkv_b.rows(r, r + DN), true, false, dk, c,
                  1.0, 1.0);
      linear_gemm(ctx_, w.layer, be_, GemmPass::wgrad, d_wkv_b.rows(r + DN, r + DN + VD), true,
                  false, dv, c, 1.0, 1.0);
      const Tensor dk_rope = dkv.columns(h * HD + DN, (h + 1) * HD);
      if (h == 0) {
        be_.copy(d_rope, dk_rope);
      } else {
        be_.add(d_rope, dk_rope);
      }
    }
  };
  return keys;
}

AttentionShape Mla::rope_shape(const DocumentMask& documents) const {
  // One head of width DR at a time: the backend's RoPE rotates (i, i + DR/2) of each head.
  return masked(AttentionShape{ctx_.shape.batch, ctx_.shape.seq, 1, 0, d_.qk_rope_head_dim},
                documents);
}

void Mla::rope(const Tensor& qkv, const Tensor& cos_sin, const DocumentMask& documents,
               bool forward, bool key) {
  const int64_t NH = ctx_.shape.heads, HD = qk(), DN = d_.qk_nope_head_dim;
  const AttentionShape one = rope_shape(documents);
  for (int64_t h = 0; h < NH + (key ? 1 : 0); ++h) {
    const int64_t first = h * HD + DN;  // h = NH: key head 0
    const Tensor cols = qkv.columns(first, first + d_.qk_rope_head_dim);
    if (forward) {
      be_.rope_forward(cols, cos_sin, one);
    } else {
      be_.rope_backward(cols, cos_sin, one);
    }
  }
}

void Mla::recompute_core(const AttentionActivations& core, const MlaWeights& w,
                         const MlaActivations& a) {
  const AttentionShape s = masked(ctx_.shape.attention(), core.documents);
  if (ContextAttention* ring = latent_ring()) {
    // The latent ring: the normed latent and key head 0's rotated rope columns travel.
    const int64_t key0 = ctx_.shape.heads * qk(), DN = d_.qk_nope_head_dim;
    ring->forward_latent(core.heads, core.state, core.qkv, a.ckv_norm,
                         core.qkv.columns(key0 + DN, key0 + qk()), latent_keys(w, Tensor()),
                         core.documents);
  } else if (ctx_.context_attention != nullptr) {
    // Ring attention over cp passes each head's K and V (the up-projected ones: one K/V head
    // per query head, HD + VD wide), as for GQA.
    ctx_.context_attention->forward(core.heads, core.state, core.qkv, core.documents);
  } else if (tiled_) {
    be_.flash_attention_forward(core.heads, core.state, core.qkv, s, blocks_);
  } else {
    be_.attention_forward(core.heads, core.state, core.qkv, s);
  }
}

void Mla::up_project(const Tensor& x, const MlaWeights& w, const MlaActivations& a,
                     const Tensor& qkv, const Tensor& cos_sin, const DocumentMask& documents,
                     const Tensor& k_rope) {
  const int64_t NH = ctx_.shape.heads, HD = qk(), DN = d_.qk_nope_head_dim;
  const int64_t VD = d_.v_head_dim, key0 = NH * HD, value0 = 2 * NH * HD;
  auto gemm = [&](Tensor y, const Tensor& in, const Tensor& W) {
    linear_gemm(ctx_, w.layer, be_, GemmPass::forward, y, false, true, in, W, 1.0, 0.0);
  };
  // Queries: [N, NH*HD], every head [nope | rope].
  const Tensor q = qkv.columns(0, key0);
  if (d_.q_lora_rank > 0) {
    be_.rmsnorm_forward(a.cq_norm, a.rstd_q, a.cq, w.q_norm, eps_);
    gemm(q, a.cq_norm, w.wq);
  } else {
    gemm(q, x, w.wq);
  }
  // Per head: k_nope_h and v_h from the normed latent, straight into K and V.
  be_.rmsnorm_forward(a.ckv_norm, a.rstd_kv, a.ckv, w.kv_norm, eps_);
  for (int64_t h = 0; h < NH; ++h) {
    const int64_t r = h * (DN + VD);
    gemm(qkv.columns(key0 + h * HD, key0 + h * HD + DN), a.ckv_norm, w.wkv_b.rows(r, r + DN));
    gemm(qkv.columns(value0 + h * VD, value0 + (h + 1) * VD), a.ckv_norm,
         w.wkv_b.rows(r + DN, r + DN + VD));
  }
  rope(qkv, cos_sin, documents, /*forward=*/true, /*key=*/false);
  for (int64_t h = 0; h < NH; ++h) {  // the one rotated key, shared by every head
    const Tensor cols = qkv.columns(key0 + h * HD + DN, key0 + (h + 1) * HD);
    if (cols.raw() != k_rope.raw()) be_.copy(cols, k_rope);
  }
}

void Mla::forward(Tensor out, const Tensor& x, const MlaWeights& w, const MlaActivations& a,
                  const AttentionActivations& core, const Tensor& cos_sin) {
  const int64_t HD = qk(), DN = d_.qk_nope_head_dim, DR = d_.qk_rope_head_dim;
  const int64_t DC = d_.kv_lora_rank, key0 = ctx_.shape.heads * HD;
  auto gemm = [&](Tensor y, const Tensor& in, const Tensor& W) {
    linear_gemm(ctx_, w.layer, be_, GemmPass::forward, y, false, true, in, W, 1.0, 0.0);
  };
  const Tensor& qkv = core.qkv;
  // Down-projections: the latents, and the rope key into key head 0's rope columns (rotated).
  if (d_.q_lora_rank > 0) gemm(a.cq, x, w.wq_a);
  gemm(a.ckv, x, w.wkv_a.rows(0, DC));
  const Tensor k_rope = qkv.columns(key0 + DN, key0 + HD);
  gemm(k_rope, x, w.wkv_a.rows(DC, DC + DR));
  be_.rope_forward(k_rope, cos_sin, rope_shape(core.documents));
  if (!a.k_rope.empty()) be_.copy(a.k_rope, k_rope);  // norm-up keeps it
  up_project(x, w, a, qkv, cos_sin, core.documents, k_rope);
  recompute_core(core, w, a);
  linear_gemm(ctx_, w.layer, be_, GemmPass::forward, out, false, true, core.heads, w.wo, 1.0, 1.0);
}

void Mla::recompute_up(const Tensor& x, const MlaWeights& w, const MlaActivations& a,
                       const AttentionActivations& core, const Tensor& cos_sin) {
  TRILLION_CHECK(!a.k_rope.empty(), "norm-up recompute needs the kept rope key");
  up_project(x, w, a, core.qkv, cos_sin, core.documents, a.k_rope);
}

void Mla::backward_input(Tensor dx, const Tensor& dout, const MlaWeights& w,
                         const MlaActivations& a, const AttentionActivations& core,
                         const AttentionStash& d_core, const MlaStash& g, const Tensor& d_heads,
                         const Tensor& cos_sin) {
  const LocalShape& ls = ctx_.shape;
  const int64_t NH = ls.heads, HD = qk(), DN = d_.qk_nope_head_dim, DR = d_.qk_rope_head_dim;
  const int64_t VD = d_.v_head_dim, DC = d_.kv_lora_rank, key0 = NH * HD, value0 = 2 * NH * HD;
  auto dgrad = [&](Tensor dy_in, const Tensor& dy, const Tensor& W, double beta) {
    linear_gemm(ctx_, w.layer, be_, GemmPass::dgrad, dy_in, false, false, dy, W, 1.0, beta);
  };
  const AttentionShape s = masked(ls.attention(), core.documents);
  const Tensor& dqkv = d_core.d_qkv;
  dgrad(d_heads, dout, w.wo, 0.0);
  ContextAttention* latent = latent_ring();
  if (latent != nullptr) {
    // dqkv gets dQ, the latent's gradient lands in d_ckv_norm and key head 0's rope columns
    // (the other heads' K/V columns stay zero), Wkv_b's wgrad in the stash.
    be_.fill(g.d_wkv_b, 0.0);
    latent->backward_latent(dqkv, g.d_ckv_norm, dqkv.columns(key0 + DN, key0 + HD), d_heads,
                            core.heads, core.qkv, a.ckv_norm,
                            core.qkv.columns(key0 + DN, key0 + HD), core.state,
                            latent_keys(w, g.d_wkv_b), core.documents);
  } else if (ctx_.context_attention != nullptr) {
    ctx_.context_attention->backward(dqkv, d_heads, core.heads, core.qkv, core.state,
                                     core.documents);
  } else if (tiled_) {
    be_.flash_attention_backward(dqkv, d_heads, core.heads, core.qkv, core.state, s, blocks_);
  } else {
    be_.attention_backward(dqkv, d_heads, core.qkv, core.state, s);
  }
  // The shared rope key's gradient is the sum over the heads' copies (head 0's columns hold
  // the sum from here on), un-rotated with the queries' rope columns.
  const Tensor d_k_rope = dqkv.columns(key0 + DN, key0 + HD);
  for (int64_t h = 1; h < NH; ++h) {
    be_.add(d_k_rope, dqkv.columns(key0 + h * HD + DN, key0 + (h + 1) * HD));
  }
  rope(dqkv, cos_sin, core.documents, /*forward=*/false);
  be_.copy(g.d_k_rope, d_k_rope);
  // The kv latent: d(ckv_norm) = sum over heads of dk_nope_h Wk_h + dv_h Wv_h (the latent ring
  // has summed it over every rank's queries already), then its norm.
  for (int64_t h = 0; h < (latent != nullptr ? 0 : NH); ++h) {
    const int64_t r = h * (DN + VD);
    dgrad(g.d_ckv_norm, dqkv.columns(key0 + h * HD, key0 + h * HD + DN), w.wkv_b.rows(r, r + DN),
          h == 0 ? 0.0 : 1.0);
    dgrad(g.d_ckv_norm, dqkv.columns(value0 + h * VD, value0 + (h + 1) * VD),
          w.wkv_b.rows(r + DN, r + DN + VD), 1.0);
  }
  be_.fill(g.d_ckv, 0.0);
  be_.rmsnorm_backward_input(g.d_ckv, g.d_ckv_norm, a.ckv, w.kv_norm, a.rstd_kv);
  dgrad(dx, g.d_ckv, w.wkv_a.rows(0, DC), 0.0);
  dgrad(dx, g.d_k_rope, w.wkv_a.rows(DC, DC + DR), 1.0);
  // The queries.
  const Tensor dq = dqkv.columns(0, key0);
  if (d_.q_lora_rank > 0) {
    dgrad(g.d_cq_norm, dq, w.wq, 0.0);
    be_.fill(g.d_cq, 0.0);
    be_.rmsnorm_backward_input(g.d_cq, g.d_cq_norm, a.cq, w.q_norm, a.rstd_q);
    dgrad(dx, g.d_cq, w.wq_a, 1.0);
  } else {
    dgrad(dx, dq, w.wq, 1.0);
  }
}

void Mla::backward_weight(const MlaWeights& d, const Tensor& x, const Tensor& dout,
                          const MlaActivations& a, const AttentionActivations& core,
                          const AttentionStash& d_core, const MlaStash& g) {
  const int64_t NH = ctx_.shape.heads, HD = qk(), DN = d_.qk_nope_head_dim;
  const int64_t DR = d_.qk_rope_head_dim, VD = d_.v_head_dim, DC = d_.kv_lora_rank;
  const int64_t key0 = NH * HD, value0 = 2 * NH * HD;
  auto wgrad = [&](Tensor dW, const Tensor& dy, const Tensor& in) {
    linear_gemm(ctx_, d.layer, be_, GemmPass::wgrad, dW, true, false, dy, in, 1.0, 1.0);
  };
  const Tensor& dqkv = d_core.d_qkv;
  wgrad(d.wo, dout, core.heads);
  if (!g.d_wkv_b.empty()) be_.add(d.wkv_b, g.d_wkv_b);  // the latent ring's, every block's
  for (int64_t h = 0; h < (g.d_wkv_b.empty() ? NH : 0); ++h) {
    const int64_t r = h * (DN + VD);
    wgrad(d.wkv_b.rows(r, r + DN), dqkv.columns(key0 + h * HD, key0 + h * HD + DN), a.ckv_norm);
    wgrad(d.wkv_b.rows(r + DN, r + DN + VD), dqkv.columns(value0 + h * VD, value0 + (h + 1) * VD),
          a.ckv_norm);
  }
  be_.rmsnorm_backward_weight(d.kv_norm, g.d_ckv_norm, a.ckv, a.rstd_kv);
  wgrad(d.wkv_a.rows(0, DC), g.d_ckv, x);
  wgrad(d.wkv_a.rows(DC, DC + DR), g.d_k_rope, x);
  const Tensor dq = dqkv.columns(0, key0);
  if (d_.q_lora_rank > 0) {
    wgrad(d.wq, dq, a.cq_norm);
    be_.rmsnorm_backward_weight(d.q_norm, g.d_cq_norm, a.cq, a.rstd_q);
    wgrad(d.wq_a, g.d_cq, x);
  } else {
    wgrad(d.wq, dq, x);
  }
}

}  // namespace trillion
