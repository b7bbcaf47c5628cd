// See moe.h. Gathers and scatter-adds of rows use the embedding ops (a row gather by index and
// its deterministic scatter-add); gates multiply rows on the host (the CPU backend's memory).
#include "model/moe.h"

#include <fmt/format.h>

#include <numeric>

#include "core/error.h"
#include "model/carver.h"
#include "model/linear_gemm.h"

namespace trillion {

using precision::GemmPass;

int64_t ExchangePlan::received() const {
  return std::accumulate(local_rows.begin(), local_rows.end(), int64_t{0});
}

ExchangePlan LocalExchange::plan(const std::vector<int64_t>& rows_per_expert) {
  ExchangePlan p;
  const int64_t total = std::accumulate(rows_per_expert.begin(), rows_per_expert.end(), int64_t{0});
  p.send_rows = {total};
  p.recv_rows = {total};
  p.recv_counts = rows_per_expert;
  p.local_rows = rows_per_expert;
  return p;
}

void LocalExchange::dispatch(const ExchangePlan&, const Tensor& send, const Tensor& recv) {
  if (send.numel() > 0) be_.copy(recv, send);
}

void LocalExchange::combine(const ExchangePlan&, const Tensor& back, const Tensor& out) {
  if (back.numel() > 0) be_.copy(out, back);
}

namespace {

template <typename F>
void with_type(DType dt, F&& f) {
  if (dt == DType::f64) {
    f(double{});
  } else {
    f(float{});
  }
}

// dst[r] = scale[r] * src[r] for rows r (row-major [R, C]).
void scale_rows(const Tensor& dst, const Tensor& src, const std::vector<double>& scale) {
  const int64_t R = src.size(0), C = src.size(1);
  with_type(src.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* a = src.data<T>();
    T* b = dst.data<T>();
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t c = 0; c < C; ++c)
        b[r * C + c] = static_cast<T>(scale[r] * double(a[r * C + c]));
    }
  });
}

}  // namespace

Moe::Moe(Backend& backend, const ParallelContext& ctx, const MoeConfig& config,
         ExpertExchange* exchange)
    : be_(backend),
      ctx_(ctx),
      config_(config),
      local_(exchange == nullptr ? std::make_unique<LocalExchange>(backend, config.n_routed_experts)
                                 : nullptr),
      exchange_(exchange != nullptr ? exchange : local_.get()),
      router_(backend, ctx, config),
      // The shared experts are tp shards (column-parallel gate/up, row-parallel down).
      shared_(backend, ctx, config.n_shared_experts * config.expert_ffn / ctx.tp_size()) {}

void Moe::carve(Carver& kept, MoeState& s) const {
  router_.carve(kept, s.routing);
  if (config_.n_shared_experts > 0) {
    Carver& k = kept;
    s.shared = shared_.carve(k, k);
  }
}

void Moe::carve_stash(Carver& c, MoeState& s) const {
  s.dz = router_.carve_stash(c);
  if (config_.n_shared_experts > 0) s.shared_stash = shared_.carve_stash(c);
}

Tensor Moe::expert_matrix(const Tensor& stacked, int64_t e) const {
  const int64_t r = stacked.size(1), c = stacked.size(2);
  char* base = static_cast<char*>(stacked.raw()) +
               e * r * c * static_cast<int64_t>(dtype_size(stacked.dtype()));
  return Tensor(base, stacked.dtype(), {r, c});
}

void Moe::forward(Tensor out, const Tensor& x, const MoeWeights& w, MoeState& s) {
  TRILLION_CHECK(tracker_ != nullptr, "Moe needs a memory tracker for its expert buffers");
  const int64_t N = ctx_.moe_tokens(), K = config_.top_k, E = config_.n_routed_experts;
  const int64_t C = ctx_.shape.d_model, FE = expert_width();
  const DType dt = x.dtype();
  router_.forward(x, w.router, s.routing);
  // Rows in expert order: every kept assignment, grouped by expert, in token order inside.
  std::vector<int64_t> per_expert(E, 0);
  for (int64_t a = 0; a < N * K; ++a) {
    if (!s.routing.dropped[a]) ++per_expert[s.routing.expert[a]];
  }
  std::vector<int64_t> start(E + 1, 0);
  for (int64_t e = 0; e < E; ++e) start[e + 1] = start[e] + per_expert[e];
  const int64_t R = start[E];
  s.row_token.assign(R, 0);
  s.row_slot.assign(R, 0);
  std::vector<int64_t> fill = start;
  for (int64_t a = 0; a < N * K; ++a) {
    if (s.routing.dropped[a]) continue;
    const int64_t r = fill[s.routing.expert[a]]++;
    s.row_token[r] = static_cast<int32_t>(a / K);
    s.row_slot[r] = static_cast<int32_t>(a);
  }
  s.plan = exchange_->plan(per_expert);
  const int64_t received = s.plan.received();
  Buffer sent(*tracker_, MemoryCategory::workspace, dt, std::max<int64_t>(R, 1) * C);
  if (R > 0) be_.embedding_forward(sent.view(0, {R, C}), s.row_token.data(), x);
  s.xe = Buffer(*tracker_, MemoryCategory::activations, dt, std::max<int64_t>(received, 1) * C);
  s.h = Buffer(*tracker_, MemoryCategory::activations, dt, std::max<int64_t>(received, 1) * 2 * FE);
  s.act = Buffer(*tracker_, MemoryCategory::activations, dt, std::max<int64_t>(received, 1) * FE);
  exchange_->dispatch(s.plan, sent.view(0, {R, C}), s.xe.view(0, {received, C}));
  Buffer ye(*tracker_, MemoryCategory::workspace, dt, std::max<int64_t>(received, 1) * C);
  int64_t row = 0;
  for (int64_t e = 0; e < exchange_->local_experts(); ++e) {
    const int64_t n = s.plan.local_rows[e];
    if (n == 0) continue;
    const Tensor xe = s.xe.view(row * C, {n, C});
    const Tensor h = s.h.view(row * 2 * FE, {n, 2 * FE});
    linear_gemm(ctx_, w.layer, be_, GemmPass::forward, h.columns(0, FE), false, true, xe,
                expert_matrix(w.gate, e), 1.0, 0.0);
    linear_gemm(ctx_, w.layer, be_, GemmPass::forward, h.columns(FE, 2 * FE), false, true, xe,
                expert_matrix(w.up, e), 1.0, 0.0);
    const Tensor act = s.act.view(row * FE, {n, FE});
    be_.swiglu_forward(act, h);
    linear_gemm(ctx_, w.layer, be_, GemmPass::forward, ye.view(row * C, {n, C}), false, true, act,
                expert_matrix(w.down, e), 1.0, 0.0);
    row += n;
  }
  s.y = Buffer(*tracker_, MemoryCategory::activations, dt, std::max<int64_t>(R, 1) * C);
  exchange_->combine(s.plan, ye.view(0, {received, C}), s.y.view(0, {R, C}));
  if (R > 0) {
    std::vector<double> gate(R);
    with_type(dt, [&](auto tag) {
      using T = decltype(tag);
      const T* g = s.routing.gates.data<T>();
      for (int64_t r = 0; r < R; ++r) gate[r] = double(g[s.row_slot[r]]);
    });
    scale_rows(sent.view(0, {R, C}), s.y.view(0, {R, C}), gate);
    be_.embedding_backward_weight(out, s.row_token.data(), sent.view(0, {R, C}));
  }
  if (!ctx_.moe_slice) shared_forward(out, x, w, s);
}

void Moe::shared_forward(Tensor out, const Tensor& x, const MoeWeights& w, MoeState& s) {
  if (config_.n_shared_experts > 0) shared_.forward(out, x, w.shared, s.shared);
}

void Moe::shared_backward_input(Tensor dx, const Tensor& dout, const MoeWeights& w, MoeState& s) {
  const int64_t N = ctx_.shape.tokens();
  Buffer d_act(*tracker_, MemoryCategory::workspace, dout.dtype(), N * shared_.width());
  shared_.backward_input(dx, dout, w.shared, s.shared, s.shared_stash,
                         d_act.view(0, {N, shared_.width()}));
}

void Moe::shared_backward_weight(const MoeWeights& d, const Tensor& x, const Tensor& dout,
                                 MoeState& s) {
  if (config_.n_shared_experts > 0) {
    shared_.backward_weight(d.shared, x, dout, s.shared, s.shared_stash);
  }
}

void Moe::backward_input(Tensor dx, const Tensor& dout, const MoeWeights& w, MoeState& s) {
  const int64_t N = ctx_.moe_tokens(), K = config_.top_k, C = ctx_.shape.d_model;
  const int64_t FE = expert_width(), R = static_cast<int64_t>(s.row_token.size());
  const int64_t received = s.plan.received();
  const DType dt = dout.dtype();
  if (ctx_.moe_slice) {
    // dx holds the shared experts' part already (Block gathers and scatters it).
  } else if (config_.n_shared_experts > 0) {
    shared_backward_input(dx, dout, w, s);
  } else {
    be_.fill(dx, 0.0);
  }
  // dgate per assignment and the gated output gradient of every row.
  std::vector<double> dgates(N * K, 0.0), gate(R);
  Buffer dout_rows(*tracker_, MemoryCategory::workspace, dt, std::max<int64_t>(R, 1) * C);
  if (R > 0) be_.embedding_forward(dout_rows.view(0, {R, C}), s.row_token.data(), dout);
  with_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* y = static_cast<const T*>(s.y.raw());
    const T* d = static_cast<const T*>(dout_rows.raw());
    const T* g = s.routing.gates.data<T>();
    for (int64_t r = 0; r < R; ++r) {
      double dot = 0;
      for (int64_t c = 0; c < C; ++c) dot += double(y[r * C + c]) * double(d[r * C + c]);
      dgates[s.row_slot[r]] = dot;
      gate[r] = double(g[s.row_slot[r]]);
    }
  });
  // Experts split over tp: y, hence each dot, is this rank's partial sum over its columns.
  if (ctx_.experts_tp) ctx_.tp->all_reduce(Tensor(dgates.data(), DType::f64, {N * K}));
  Buffer dy(*tracker_, MemoryCategory::workspace, dt, std::max<int64_t>(R, 1) * C);
  if (R > 0) scale_rows(dy.view(0, {R, C}), dout_rows.view(0, {R, C}), gate);
  s.dye = Buffer(*tracker_, MemoryCategory::workspace, dt, std::max<int64_t>(received, 1) * C);
  s.dh = Buffer(*tracker_, MemoryCategory::workspace, dt, std::max<int64_t>(received, 1) * 2 * FE);
  exchange_->dispatch(s.plan, dy.view(0, {R, C}), s.dye.view(0, {received, C}));
  Buffer dxe(*tracker_, MemoryCategory::workspace, dt, std::max<int64_t>(received, 1) * C);
  Buffer d_act(*tracker_, MemoryCategory::workspace, dt, std::max<int64_t>(received, 1) * FE);
  int64_t row = 0;
  for (int64_t e = 0; e < exchange_->local_experts(); ++e) {
    const int64_t n = s.plan.local_rows[e];
    if (n == 0) continue;
    const Tensor dye = s.dye.view(row * C, {n, C});
    const Tensor da = d_act.view(row * FE, {n, FE});
    const Tensor dh = s.dh.view(row * 2 * FE, {n, 2 * FE});
    linear_gemm(ctx_, w.layer, be_, GemmPass::dgrad, da, false, false, dye,
                expert_matrix(w.down, e), 1.0, 0.0);
    be_.swiglu_backward(dh, da, s.h.view(row * 2 * FE, {n, 2 * FE}));
    const Tensor dxr = dxe.view(row * C, {n, C});
    linear_gemm(ctx_, w.layer, be_, GemmPass::dgrad, dxr, false, false, dh.columns(0, FE),
                expert_matrix(w.gate, e), 1.0, 0.0);
    linear_gemm(ctx_, w.layer, be_, GemmPass::dgrad, dxr, false, false, dh.columns(FE, 2 * FE),
                expert_matrix(w.up, e), 1.0, 1.0);
    row += n;
  }
  Buffer dx_rows(*tracker_, MemoryCategory::workspace, dt, std::max<int64_t>(R, 1) * C);
  exchange_->combine(s.plan, dxe.view(0, {received, C}), dx_rows.view(0, {R, C}));
  if (R > 0) be_.embedding_backward_weight(dx, s.row_token.data(), dx_rows.view(0, {R, C}));
  router_.backward_input(dx, s.dz, dgates, w.router, s.routing, s.grad_scale);
}

void Moe::backward_weight(const MoeWeights& d, const Tensor& x, const Tensor& dout, MoeState& s) {
  const int64_t C = ctx_.shape.d_model, FE = expert_width();
  int64_t row = 0;
  for (int64_t e = 0; e < exchange_->local_experts(); ++e) {
    const int64_t n = s.plan.local_rows[e];
    if (n == 0) continue;
    const Tensor dye = s.dye.view(row * C, {n, C});
    const Tensor dh = s.dh.view(row * 2 * FE, {n, 2 * FE});
    const Tensor xe = s.xe.view(row * C, {n, C});
    linear_gemm(ctx_, d.layer, be_, GemmPass::wgrad, expert_matrix(d.down, e), true, false, dye,
                s.act.view(row * FE, {n, FE}), 1.0, 1.0);
    linear_gemm(ctx_, d.layer, be_, GemmPass::wgrad, expert_matrix(d.gate, e), true, false,
                dh.columns(0, FE), xe, 1.0, 1.0);
    linear_gemm(ctx_, d.layer, be_, GemmPass::wgrad, expert_matrix(d.up, e), true, false,
                dh.columns(FE, 2 * FE), xe, 1.0, 1.0);
    row += n;
  }
  router_.backward_weight(d.router.router, x, s.dz);
  if (!ctx_.moe_slice) shared_backward_weight(d, x, dout, s);
  release_rows(s);
}

void Moe::recompute(const Tensor& x, const MoeWeights& w, MoeState& s) {
  const int64_t N = ctx_.moe_tokens(), C = ctx_.shape.d_model;
  Buffer out(*tracker_, MemoryCategory::workspace, x.dtype(), N * C);
  be_.fill(out.flat(), 0.0);
  forward(out.view(0, {N, C}), x, w, s);
}

void Moe::release_rows(MoeState& s) {
  s.xe = Buffer();
  s.h = Buffer();
  s.act = Buffer();
  s.y = Buffer();
  s.dye = Buffer();
  s.dh = Buffer();
}

}  // namespace trillion
