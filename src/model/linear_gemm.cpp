// See linear_gemm.h.
#include "model/linear_gemm.h"

#include <fmt/format.h>

#include <vector>

#include "backend/cpu/onednn_bf16.h"
#include "core/timer.h"
#include "model/parallel_context.h"
#include "precision/scaled_gemm.h"

namespace trillion {

namespace {

using precision::GemmPass;
using precision::OperandRule;

// X [rows, cols] (row stride ld) rounded to bf16, as a contiguous fp32 copy.
std::vector<float> rounded_to_bf16(const Tensor& X) {
  const int64_t rows = X.size(0), cols = X.size(1), ld = X.stride(0);
  const float* x = X.data<float>();
  std::vector<float> out(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      out[r * cols + c] = bf16_to_float(float_to_bf16(x[r * ld + c]));
  }
  return out;
}

// X [rows, cols] (row stride ld) as contiguous bf16 (nearest even), in `buffer`: a GEMM operand
// converted per call. The buffers are kept per thread and only grow, so after the first step no
// call allocates (a fresh large vector per call cost page faults on every GEMM).
const bf16* bf16_copy(const Tensor& X, std::vector<bf16>& buffer) {
  const int64_t rows = X.size(0), cols = X.size(1);
  if (static_cast<int64_t>(buffer.size()) < rows * cols) buffer.resize(rows * cols);
  floats_to_bf16(X.data<float>(), rows, cols, X.stride(0), buffer.data());
  return buffer.data();
}
thread_local std::vector<bf16> operand_a, operand_b;

// op(X) laid out as [rows, K] with K along the rows' elements: X itself when it is already so
// (transposed == false), else a transposed contiguous copy in `copy`.
struct RowsAlongK {
  const float* data;
  int64_t rows, k, ld;
};
RowsAlongK rows_along_k(const Tensor& X, bool transposed, std::vector<float>& copy) {
  const float* x = X.data<float>();
  const int64_t r = X.size(0), c = X.size(1), ld = X.stride(0);
  if (!transposed) return {x, r, c, ld};
  copy.resize(r * c);
  for (int64_t i = 0; i < r; ++i) {
    for (int64_t j = 0; j < c; ++j) copy[j * r + i] = x[i * ld + j];
  }
  return {copy.data(), c, r, r};
}

precision::QuantizeOptions options_of(const OperandRule& rule, const Philox* rng) {
  return {rule.format, rule.scaling, rule.tile_rows, rule.tile_cols,
          rule.stochastic ? rng : nullptr};
}

}  // namespace

LinearPrecision::LinearPrecision(const precision::Recipe& recipe, uint64_t seed,
                                 precision::Bf16Blocks bf16_blocks, int64_t n_layers,
                                 bool head_bf16)
    : recipe_(recipe),
      seed_(seed),
      bf16_blocks_(bf16_blocks),
      n_layers_(n_layers),
      head_bf16_(head_bf16) {
  TRILLION_CHECK(bf16_blocks_.first + bf16_blocks_.last <= n_layers_,
                 "bf16 blocks beyond the model's layers");
  if (recipe_.rounding == precision::Rounding::block_scaled && recipe_.wgrad_hadamard > 0) {
    wgrad_rht_.emplace(recipe_.wgrad_hadamard, seed);
  }
}

void LinearPrecision::attach_weights(const Buffer& master, MemoryTracker& tracker) {
  TRILLION_CHECK(master.dtype() == DType::f32, "a precision recipe needs fp32 master weights");
  master_ = &master;
  copy_ = Buffer(tracker, MemoryCategory::parameters, DType::bf16, master.count());
  refresh_weights();
}

void LinearPrecision::refresh_weights() {
  if (master_ == nullptr) return;
  floats_to_bf16(static_cast<const float*>(master_->raw()), 1, master_->count(), master_->count(),
                 static_cast<bf16*>(copy_.raw()));
}

const bf16* LinearPrecision::weight_in_copy(const Tensor& W) const {
  const int64_t rows = W.size(0), cols = W.size(1), ld = W.stride(0);
  const float* w = W.data<float>();
  const float* base = master_ ? static_cast<const float*>(master_->raw()) : nullptr;
  const int64_t extent = (rows - 1) * ld + cols;
  const bool in_master = base != nullptr && w >= base && w + extent <= base + master_->count();
  if (in_master) return static_cast<const bf16*>(copy_.raw()) + (w - base);
  return weight_source_ ? weight_source_(w, extent) : nullptr;
}

std::vector<float> LinearPrecision::weight_values(const Tensor& W) const {
  const int64_t rows = W.size(0), cols = W.size(1), ld = W.stride(0);
  const bf16* c = weight_in_copy(W);
  if (c == nullptr) return rounded_to_bf16(W);
  std::vector<float> out(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) out[r * cols + j] = bf16_to_float(c[r * ld + j]);
  }
  return out;
}

void LinearPrecision::bf16_gemm_onednn(Backend& be, GemmPass pass, Tensor C, bool ta, bool tb,
                                       const Tensor& A, const Tensor& B, double alpha,
                                       double beta) const {
  const int64_t M = C.size(0), N = C.size(1), K = ta ? A.size(0) : A.size(1);
  TRILLION_CHECK((tb ? B.size(1) : B.size(0)) == K && (ta ? A.size(1) : A.size(0)) == M &&
                     (tb ? B.size(0) : B.size(1)) == N,
                 fmt::format("linear_gemm shapes: C {} = op(A {}) op(B {}), trans {} {}",
                             C.shape_string(), A.shape_string(), B.shape_string(), ta, tb));
  Timer rounding;
  const bf16* a = bf16_copy(A, operand_a);
  double rounded = static_cast<double>(A.numel());
  const bf16* b = nullptr;
  int64_t ldb = B.size(1);
  const bf16* in_copy = pass == GemmPass::wgrad ? nullptr : weight_in_copy(B);
  if (in_copy != nullptr) {
    b = in_copy, ldb = B.stride(0);
  } else {
    b = bf16_copy(B, operand_b);
    rounded += static_cast<double>(B.numel());
  }
  // Each rounded element: 4 bytes read, 2 written.
  be.record_external("bf16 rounding", rounding.seconds(), 0, 6 * rounded);
  Timer product;
  onednn_bf16_gemm(ta, tb, M, N, K, a, A.size(1), b, ldb, static_cast<float>(alpha),
                   static_cast<float>(beta), C.data<float>(), C.stride(0));
  be.record_external("linear bf16 (oneDNN)", product.seconds(),
                     2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K),
                     0);
}

void LinearPrecision::bf16_gemm(Backend& be, GemmPass pass, Tensor C, bool ta, bool tb,
                                const Tensor& A, const Tensor& B, double alpha, double beta) const {
  if (onednn_bf16_available()) {
    bf16_gemm_onednn(be, pass, C, ta, tb, A, B, alpha, beta);
    return;
  }
  std::vector<float> a = rounded_to_bf16(A);
  std::vector<float> b = pass == GemmPass::wgrad ? rounded_to_bf16(B) : weight_values(B);
  be.gemm(C, ta, tb, Tensor(a.data(), DType::f32, {A.size(0), A.size(1)}),
          Tensor(b.data(), DType::f32, {B.size(0), B.size(1)}), alpha, beta);
}

void LinearPrecision::head_gemm(Backend& be, GemmPass pass, Tensor C, bool ta, bool tb,
                                const Tensor& A, const Tensor& B, double alpha, double beta) const {
  if (head_bf16_ && C.dtype() == DType::f32) {
    bf16_gemm(be, pass, C, ta, tb, A, B, alpha, beta);
  } else {
    be.gemm(C, ta, tb, A, B, alpha, beta);
  }
}

void LinearPrecision::gemm(Backend& be, GemmPass pass, Tensor C, bool ta, bool tb, const Tensor& A,
                           const Tensor& B, double alpha, double beta, int64_t layer) {
  using precision::Rounding;
  if (recipe_.rounding == Rounding::none || C.dtype() != DType::f32) {
    be.gemm(C, ta, tb, A, B, alpha, beta);
    return;
  }
  TRILLION_CHECK(C.rank() == 2 && A.rank() == 2 && B.rank() == 2, "linear_gemm takes 2-D views");
  if (recipe_.rounding == Rounding::bf16 || in_bf16(layer)) {
    bf16_gemm(be, pass, C, ta, tb, A, B, alpha, beta);
    return;
  }
  // op(A) [M, K] as stored rows when not transposed; op(B)^T [N, K] is B itself when tb.
  std::vector<float> a_copy, b_copy, b_weights;
  RowsAlongK a = rows_along_k(A, ta, a_copy);
  Tensor b_source = B;
  if (pass != GemmPass::wgrad) {  // B is a weight: its bf16 values
    b_weights = weight_values(B);
    b_source = Tensor(b_weights.data(), DType::f32, {B.size(0), B.size(1)});
  }
  RowsAlongK b = rows_along_k(b_source, !tb, b_copy);
  TRILLION_CHECK(a.k == b.k && a.rows == C.size(0) && b.rows == C.size(1),
                 fmt::format("linear_gemm shapes: C {} = op(A {}) op(B {}), trans {} {}",
                             C.shape_string(), A.shape_string(), B.shape_string(), ta, tb));
  // NVFP4's wgrad inputs: (dy^T R)(x^T R)^T = dy^T x, with the outliers along the tokens spread.
  std::vector<float> a_rht, b_rht;
  if (pass == GemmPass::wgrad && wgrad_rht_) {
    const int64_t kp = wgrad_rht_->padded(a.k);
    wgrad_rht_->apply(a.data, a.rows, a.k, a.ld, a_rht);
    wgrad_rht_->apply(b.data, b.rows, b.k, b.ld, b_rht);
    a = {a_rht.data(), a.rows, kp, kp};
    b = {b_rht.data(), b.rows, kp, kp};
  }
  const precision::Recipe& r = recipe_;
  const OperandRule& rule_a = pass == GemmPass::forward ? r.activation : r.gradient;
  const OperandRule& rule_b = pass == GemmPass::wgrad ? r.activation : r.weight;
  const bool stochastic = rule_a.stochastic || rule_b.stochastic;
  // The site's key: the same GEMM of the same micro-batch draws the same numbers in any schedule.
  int64_t& calls = calls_[static_cast<int>(pass)];
  const std::string site =
      fmt::format("{}:{}:{}:{}:{}", step_, microbatch_, layer_, static_cast<int>(pass), calls);
  if (stochastic) ++calls;
  const Philox rng(seed_, "linear_sr:" + site);
  const precision::BlockQuantized qa =
      precision::quantize(a.data, a.rows, a.k, a.ld, options_of(rule_a, &rng));
  const Philox rng_b(seed_, "linear_sr_b:" + site);
  const precision::BlockQuantized qb =
      precision::quantize(b.data, b.rows, b.k, b.ld, options_of(rule_b, &rng_b));
  std::vector<float> product(a.rows * b.rows);
  precision::scaled_gemm(qa, qb, product.data());
  float* c = C.data<float>();
  const int64_t M = a.rows, N = b.rows, ldc = C.stride(0);
  const float fa = static_cast<float>(alpha), fb = static_cast<float>(beta);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      float& out = c[m * ldc + n];
      out = fb == 0 ? fa * product[m * N + n] : fa * product[m * N + n] + fb * out;
    }
  }
}

void linear_gemm(const ParallelContext& ctx, int64_t layer, Backend& be, precision::GemmPass pass,
                 Tensor C, bool ta, bool tb, const Tensor& A, const Tensor& B, double alpha,
                 double beta) {
  if (ctx.precision == nullptr) {
    be.gemm(C, ta, tb, A, B, alpha, beta);
  } else {
    ctx.precision->gemm(be, pass, C, ta, tb, A, B, alpha, beta, layer);
  }
}

}  // namespace trillion
