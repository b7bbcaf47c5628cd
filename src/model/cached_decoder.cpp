// See cached_decoder.h. Per layer: normed = rmsnorm(x); qkv = normed Wqkv^T; rope(q, k) at the
// position; cache k, v; heads = softmax(q K^T / sqrt(HD)) V per query head (kv head h / (NH/KV));
// x += heads Wo^T; x += Wdown swiglu(rmsnorm(x) Wgate_up^T). Then logits = rmsnorm(x) Whead^T.
#include "model/cached_decoder.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace trillion {

namespace {
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
    E sum = 0;
    for (int64_t t = 0; t < n; ++t) sum += sp[t] = std::exp(sp[t] - mx);
    E* out = heads.data<E>() + h * HD;
    for (int64_t d = 0; d < HD; ++d) out[d] = 0;
    for (int64_t t = 0; t < n; ++t) {
      const E w = sp[t] / sum;
      for (int64_t d = 0; d < HD; ++d) out[d] += w * vp[t * KW + d];
    }
  }
}
}  // namespace

CachedDecoder::CachedDecoder(const ModelConfig& config, const TensorTable& table,
                             const Buffer& params, Backend& backend, MemoryTracker& tracker)
    : config_(config), table_(table), params_(params), be_(backend) {
  config_.validate();
  if (config_.moe.enabled())
    throw Error("the KV-cached decoder supports dense models only; pass --no-kv-cache");
  if (config_.mla) {
    throw Error(
        "the KV-cached decoder supports grouped-query attention only (MLA's latent cache is not "
        "implemented yet); pass --no-kv-cache");
  }
  const DType dt = config_.dtype;
  const int64_t T = config_.seq_len, HD = config_.head_dim, C = config_.d_model;
  const int64_t NH = config_.n_heads, KV = config_.n_kv_heads, F = config_.ffn_hidden;
  const int64_t L = config_.n_layers, V = config_.vocab_size, half = HD / 2;
  std::vector<double> cs(T * HD);
  for (int64_t pos = 0; pos < T; ++pos) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = pos * std::pow(config_.rope_theta, -2.0 * static_cast<double>(i) / HD);
      cs[pos * HD + i] = std::cos(angle);
      cs[pos * HD + half + i] = std::sin(angle);
    }
  }
  cos_sin_ = Buffer(tracker, MemoryCategory::workspace, dt, T * HD);
  be_.copy(cos_sin_.flat(), Tensor(cs.data(), DType::f64, {T * HD}));
  k_cache_ = Buffer(tracker, MemoryCategory::activations, dt, L * T * KV * HD);
  v_cache_ = Buffer(tracker, MemoryCategory::activations, dt, L * T * KV * HD);
  const int64_t qkv = (NH + 2 * KV) * HD;
  const int64_t sizes[] = {C, C, 1, qkv, NH * HD, 2 * F, F, T, V};
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
  heads_ = take(NH * HD);
  gate_up_ = take(2 * F);
  act_ = take(F);
  scores_ = take(T);
  logits_ = take(V);
}

const Tensor& CachedDecoder::step(int32_t token) {
  const int64_t T = config_.seq_len, HD = config_.head_dim, NH = config_.n_heads;
  const int64_t KV = config_.n_kv_heads, F = config_.ffn_hidden, C = config_.d_model;
  const int64_t V = config_.vocab_size, pos = position_, KW = KV * HD;
  TRILLION_CHECK(pos < T, "CachedDecoder::step past seq_len");
  TRILLION_CHECK(token >= 0 && token < V, "CachedDecoder::step token id");
  const double eps = config_.norm_eps;
  const AttentionShape one{1, 1, NH, KV, HD};
  const Tensor cs = cos_sin_.view(pos * HD, {1, HD});
  be_.embedding_forward(x_, &token, param("embed"));
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    be_.rmsnorm_forward(normed_, rstd_, x_, param(p + "attn_norm"), eps);
    // wq | wk | wv are contiguous in the table: one [QKV, C] matrix.
    const Tensor wqkv = params_.view(table_.spec(table_.index(p + "attn.wq")).offset,
                                     {(NH + 2 * KV) * HD, C});
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
