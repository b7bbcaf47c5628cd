// See cached_decoder.h. Per layer: normed = rmsnorm(x); attention (GQA: qkv = normed Wqkv^T;
// rope(q, k) at the position; cache k, v; heads = softmax(q K^T / sqrt(HD)) V per query head, kv
// head h / (NH/KV). MLA: below); x += heads Wo^T; x += Wdown swiglu(rmsnorm(x) Wgate_up^T). Then
// logits = rmsnorm(x) Whead^T.
#include "model/cached_decoder.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace trillion {

namespace {
// out[width] = sum_t softmax(s)_t rows[t * stride ..] over t < n, where mx = max_t s[t]; s is
// overwritten with exp(s - mx).
template <typename E>
void softmax_combine(E* s, int64_t n, E mx, const E* rows, int64_t stride, int64_t width, E* out) {
  E sum = 0;
  for (int64_t t = 0; t < n; ++t) sum += s[t] = std::exp(s[t] - mx);
  for (int64_t d = 0; d < width; ++d) out[d] = 0;
  for (int64_t t = 0; t < n; ++t) {
    const E w = s[t] / sum;
    for (int64_t d = 0; d < width; ++d) out[d] += w * rows[t * stride + d];
  }
}

// heads[h] = softmax_t(q_h . K_g[t] / sqrt(HD)) V_g[t] over t < n, g = h / (NH / KV); K and V are
// [n, KV*HD] cache rows. Accumulated in E like the engine's kernels.
template <typename E>
void attend(const Tensor& qkv, const Tensor& k, const Tensor& v, const Tensor& scores,
            const Tensor& heads, int64_t n, int64_t NH, int64_t KV, int64_t HD) {
  const int64_t KW = KV * HD, group = NH / KV;
  const E scale = static_cast<E>(1.0 / std::sqrt(static_cast<double>(HD)));
  E* sp = scores.data<E>();
  for (int64_t h = 0; h < NH; ++h) {
    const E* q = qkv.data<E>() + h * HD;
    const E* kp = k.data<E>() + (h / group) * HD;
    const E* vp = v.data<E>() + (h / group) * HD;
    E mx = -INFINITY;
    for (int64_t t = 0; t < n; ++t) {
      E dot = 0;
      for (int64_t d = 0; d < HD; ++d) dot += q[d] * kp[t * KW + d];
      sp[t] = dot * scale;
      mx = std::max(mx, sp[t]);
    }
    softmax_combine(sp, n, mx, vp, KW, HD, heads.data<E>() + h * HD);
  }
}

// MLA over the latent cache: score_t = (q_abs_h . c_t + q_rope_h . r_t) / sqrt(HD) for head h
// (q_abs_h [DC] the absorbed nope query, q_rope_h the head's rotated rope columns of q), and
// context_h = sum_t softmax(score)_t c_t [DC]. c: [n, DC] normed latents, r: [n, DR] rope keys.
template <typename E>
void attend_latent(const Tensor& q, const Tensor& q_abs, const Tensor& c, const Tensor& r,
                   const Tensor& scores, const Tensor& context, int64_t n, int64_t NH, int64_t HD,
                   int64_t DN, int64_t DC) {
  const int64_t DR = HD - DN;
  const E scale = static_cast<E>(1.0 / std::sqrt(static_cast<double>(HD)));
  E* sp = scores.data<E>();
  for (int64_t h = 0; h < NH; ++h) {
    const E* qa = q_abs.data<E>() + h * DC;
    const E* qr = q.data<E>() + h * HD + DN;
    E mx = -INFINITY;
    for (int64_t t = 0; t < n; ++t) {
      E dot = 0;
      for (int64_t d = 0; d < DC; ++d) dot += qa[d] * c.data<E>()[t * DC + d];
      for (int64_t d = 0; d < DR; ++d) dot += qr[d] * r.data<E>()[t * DR + d];
      sp[t] = dot * scale;
      mx = std::max(mx, sp[t]);
    }
    softmax_combine(sp, n, mx, c.data<E>(), DC, DC, context.data<E>() + h * DC);
  }
}
}  // namespace

CachedDecoder::CachedDecoder(const ModelConfig& config, const TensorTable& table,
                             const Buffer& params, Backend& backend, MemoryTracker& tracker)
    : config_(config), table_(table), params_(params), be_(backend) {
  config_.validate();
  if (config_.moe.enabled())
    throw Error("the KV-cached decoder supports dense models only; pass --no-kv-cache");
  const DType dt = config_.dtype;
  const int64_t T = config_.seq_len, HD = config_.head_dim, C = config_.d_model;
  const int64_t NH = config_.n_heads, KV = config_.n_kv_heads, F = config_.ffn_hidden;
  const int64_t L = config_.n_layers, V = config_.vocab_size, R = config_.rope_dim();
  const int64_t half = R / 2;
  std::vector<double> cs(T * R);
  for (int64_t pos = 0; pos < T; ++pos) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = pos * std::pow(config_.rope_theta, -2.0 * static_cast<double>(i) / R);
      cs[pos * R + i] = std::cos(angle);
      cs[pos * R + half + i] = std::sin(angle);
    }
  }
  cos_sin_ = Buffer(tracker, MemoryCategory::workspace, dt, T * R);
  be_.copy(cos_sin_.flat(), Tensor(cs.data(), DType::f64, {T * R}));
  const MlaConfig& m = config_.mla_dims;
  const int64_t DQ = m.q_lora_rank, DC = m.kv_lora_rank, VD = config_.value_dim();
  if (config_.mla) {
    k_cache_ = Buffer(tracker, MemoryCategory::activations, dt, L * T * DC);
    v_cache_ = Buffer(tracker, MemoryCategory::activations, dt, L * T * R);
  } else {
    k_cache_ = Buffer(tracker, MemoryCategory::activations, dt, L * T * KV * HD);
    v_cache_ = Buffer(tracker, MemoryCategory::activations, dt, L * T * KV * HD);
  }
  // MLA's qkv_ holds the queries [NH*HD], then the latent [DC] and the rope key [DR].
  const int64_t qkv = config_.mla ? NH * HD + DC + R : (NH + 2 * KV) * HD;
  const int64_t mla_work = config_.mla ? 2 * DQ + 2 * NH * DC : 0;
  const int64_t sizes[] = {C, C, 1, qkv, NH * VD, 2 * F, F, T, V, mla_work};
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  work_ = Buffer(tracker, MemoryCategory::workspace, dt, total);
  int64_t off = 0;
  auto take = [&](int64_t n) {
    Tensor t = work_.view(off, {1, n});
    off += n;
    return t;
  };
  x_ = take(C);
  normed_ = take(C);
  rstd_ = work_.view(off++, {1});
  qkv_ = take(qkv);
  heads_ = take(NH * VD);
  gate_up_ = take(2 * F);
  act_ = take(F);
  scores_ = take(T);
  logits_ = take(V);
  if (config_.mla) {
    if (DQ > 0) cq_ = take(2 * DQ);  // the query latent, then its norm
    q_abs_ = take(NH * DC);
    context_ = take(NH * DC);
  }
}

int64_t CachedDecoder::cache_bytes_per_token() const {
  const int64_t per_layer = config_.mla
                                ? config_.mla_dims.kv_lora_rank + config_.mla_dims.qk_rope_head_dim
                                : 2 * config_.n_kv_heads * config_.head_dim;
  return config_.n_layers * per_layer * static_cast<int64_t>(dtype_size(config_.dtype));
}

void CachedDecoder::attend_gqa(int64_t l, int64_t pos, const std::string& p, const Tensor& cs) {
  const int64_t T = config_.seq_len, HD = config_.head_dim, NH = config_.n_heads;
  const int64_t KV = config_.n_kv_heads, C = config_.d_model, KW = KV * HD;
  const AttentionShape one{1, 1, NH, KV, HD};
  // wq | wk | wv are contiguous in the table: one [QKV, C] matrix.
  const Tensor wqkv =
      params_.view(table_.spec(table_.index(p + "attn.wq")).offset, {(NH + 2 * KV) * HD, C});
  be_.gemm(qkv_, false, true, normed_, wqkv, 1.0, 0.0);
  be_.rope_forward(qkv_, cs, one);
  const int64_t cache0 = l * T * KW;
  const Tensor k_all = k_cache_.view(cache0, {T, KW}), v_all = v_cache_.view(cache0, {T, KW});
  be_.copy(k_all.rows(pos, pos + 1), qkv_.view({NH + 2 * KV, HD}).rows(NH, NH + KV).view({1, KW}));
  be_.copy(v_all.rows(pos, pos + 1),
           qkv_.view({NH + 2 * KV, HD}).rows(NH + KV, NH + 2 * KV).view({1, KW}));
  if (qkv_.dtype() == DType::f64) {
    attend<double>(qkv_, k_all, v_all, scores_, heads_, pos + 1, NH, KV, HD);
  } else {
    attend<float>(qkv_, k_all, v_all, scores_, heads_, pos + 1, NH, KV, HD);
  }
}

// Queries as the full forward makes them (q = Wq rmsnorm(Wq_a x), or Wq x; each head [nope |
// rope], rope rotated); the token's normed latent and rotated shared key go into the cache; each
// head's nope query is absorbed into Wk_h (q_abs_h = Wk_h^T q_nope_h, [DC]); the scores and the
// latent context (sum_t p_t c_t) are taken over the cache; Wv_h turns the context into the head.
void CachedDecoder::attend_mla(int64_t l, int64_t pos, const std::string& p, const Tensor& cs) {
  const MlaConfig& m = config_.mla_dims;
  const int64_t T = config_.seq_len, NH = config_.n_heads, HD = config_.head_dim;
  const int64_t DN = m.qk_nope_head_dim, DR = m.qk_rope_head_dim, DC = m.kv_lora_rank;
  const int64_t VD = m.v_head_dim, q_width = NH * HD;
  const double eps = config_.norm_eps;
  const AttentionShape rope_one{1, 1, 1, 0, DR};
  const Tensor q = qkv_.columns(0, q_width);
  const int64_t DQ = m.q_lora_rank;
  const Tensor cq_norm = DQ > 0 ? cq_.columns(DQ, 2 * DQ) : normed_;
  if (DQ > 0) {
    const Tensor cq = cq_.columns(0, DQ);
    be_.gemm(cq, false, true, normed_, param(p + "attn.wq_a"), 1.0, 0.0);
    be_.rmsnorm_forward(cq_norm, rstd_, cq, param(p + "attn.q_norm"), eps);
  }
  be_.gemm(q, false, true, cq_norm, param(p + (DQ > 0 ? "attn.wq_b" : "attn.wq")), 1.0, 0.0);
  for (int64_t h = 0; h < NH; ++h) {
    be_.rope_forward(q.columns(h * HD + DN, (h + 1) * HD), cs, rope_one);
  }
  const Tensor wkv_a = param(p + "attn.wkv_a"), wkv_b = param(p + "attn.wkv_b");
  const Tensor latent = qkv_.columns(q_width, q_width + DC);
  const Tensor k_rope = qkv_.columns(q_width + DC, q_width + DC + DR);
  const Tensor raw_latent = context_.columns(0, DC);  // scratch until the context is summed
  be_.gemm(raw_latent, false, true, normed_, wkv_a.rows(0, DC), 1.0, 0.0);
  be_.rmsnorm_forward(latent, rstd_, raw_latent, param(p + "attn.kv_norm"), eps);
  be_.gemm(k_rope, false, true, normed_, wkv_a.rows(DC, DC + DR), 1.0, 0.0);
  be_.rope_forward(k_rope, cs, rope_one);
  const Tensor c_all = k_cache_.view(l * T * DC, {T, DC});
  const Tensor r_all = v_cache_.view(l * T * DR, {T, DR});
  be_.copy(c_all.rows(pos, pos + 1), latent);
  be_.copy(r_all.rows(pos, pos + 1), k_rope);
  for (int64_t h = 0; h < NH; ++h) {
    const int64_t r = h * (DN + VD);
    be_.gemm(q_abs_.columns(h * DC, (h + 1) * DC), false, false, q.columns(h * HD, h * HD + DN),
             wkv_b.rows(r, r + DN), 1.0, 0.0);
  }
  if (qkv_.dtype() == DType::f64) {
    attend_latent<double>(q, q_abs_, c_all, r_all, scores_, context_, pos + 1, NH, HD, DN, DC);
  } else {
    attend_latent<float>(q, q_abs_, c_all, r_all, scores_, context_, pos + 1, NH, HD, DN, DC);
  }
  for (int64_t h = 0; h < NH; ++h) {
    const int64_t r = h * (DN + VD) + DN;
    be_.gemm(heads_.columns(h * VD, (h + 1) * VD), false, true,
             context_.columns(h * DC, (h + 1) * DC), wkv_b.rows(r, r + VD), 1.0, 0.0);
  }
}

const Tensor& CachedDecoder::step(int32_t token) {
  const int64_t T = config_.seq_len, F = config_.ffn_hidden, C = config_.d_model;
  const int64_t V = config_.vocab_size, pos = position_, R = config_.rope_dim();
  TRILLION_CHECK(pos < T, "CachedDecoder::step past seq_len");
  TRILLION_CHECK(token >= 0 && token < V, "CachedDecoder::step token id");
  const double eps = config_.norm_eps;
  const Tensor cs = cos_sin_.view(pos * R, {1, R});
  be_.embedding_forward(x_, &token, param("embed"));
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    be_.rmsnorm_forward(normed_, rstd_, x_, param(p + "attn_norm"), eps);
    if (config_.mla) {
      attend_mla(l, pos, p, cs);
    } else {
      attend_gqa(l, pos, p, cs);
    }
    be_.gemm(x_, false, true, heads_, param(p + "attn.wo"), 1.0, 1.0);
    be_.rmsnorm_forward(normed_, rstd_, x_, param(p + "mlp_norm"), eps);
    const Tensor wgu =
        params_.view(table_.spec(table_.index(p + "mlp.w_gate")).offset, {2 * F, C});
    be_.gemm(gate_up_, false, true, normed_, wgu, 1.0, 0.0);
    be_.swiglu_forward(act_, gate_up_);
    be_.gemm(x_, false, true, act_, param(p + "mlp.w_down"), 1.0, 1.0);
  }
  be_.rmsnorm_forward(normed_, rstd_, x_, param("final_norm"), eps);
  be_.gemm(logits_, false, true, normed_, param(config_.tied_embeddings ? "embed" : "lm_head"),
           1.0, 0.0);
  ++position_;
  return logits_;
}

}  // namespace trillion
