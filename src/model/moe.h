// MoE module: the feed-forward sublayer of a Mixture-of-Experts block (DeepSeek-V3 2412.19437
// §2.1.2), from the normed input to the residual add:
//   out += sum_k gate_k(x) * Expert_{e_k}(x) + sum_shared Shared(x)
// Routed experts are SwiGLU MLPs of width FE (gate and up as two GEMMs into the halves of one
// [rows, 2FE] buffer, so SwiGLU reads them as usual); shared experts are one Mlp of width
// n_shared * FE. The router (model/router.h) picks experts and gates; an ExpertExchange moves
// the rows of each expert to the rank that holds it and back (LocalExchange in one process,
// parallel/expert_comm for expert parallelism). Per micro-batch:
//   forward   route; gather each assignment's row of x in expert order (rows of an expert are
//             contiguous); dispatch; per local expert h = [x Wg^T | x Wu^T], act = swiglu(h),
//             y = act Wd^T; combine; out[t] += gate * y (scatter-add)
//   backward  dgate = dout[t] . y; dy = gate * dout[t]; dispatch; d_act = dy Wd, dh = swiglu',
//             dx_e = dh_gate Wg + dh_up Wu; combine; dx[t] += dx_e; router: dx += dz Wr
//   W         dWd += dy^T act, dWg += dh_gate^T x_e, dWu += dh_up^T x_e, dWr += dz^T x
// The expert rows' buffers depend on how many tokens each expert gets, so they are allocated per
// micro-batch (tracked as activations) and freed when its backward_weight is done.
#pragma once

#include <memory>
#include <vector>

#include "model/mlp.h"
#include "model/router.h"

namespace trillion {

// How many rows move where for one micro-batch's exchange.
struct ExchangePlan {
  std::vector<int64_t> send_rows;    // [ep ranks] rows this rank sends to each
  std::vector<int64_t> recv_rows;    // [ep ranks] rows it receives from each
  std::vector<int64_t> recv_counts;  // [source rank][local expert] rows received
  std::vector<int64_t> local_rows;   // [local expert] rows to compute (sum over sources)
  int64_t received() const;          // rows this rank's experts compute
};

// Moves expert-input rows from the ranks that route them to the ranks that hold the experts, and
// expert outputs back.
class ExpertExchange {
 public:
  virtual ~ExpertExchange() = default;
  virtual int64_t first_expert() const = 0;  // global index of this rank's first expert
  virtual int64_t local_experts() const = 0;
  // rows_per_expert: this rank's rows for every global expert, in expert order (exchanges the
  // counts when several ranks hold experts).
  virtual ExchangePlan plan(const std::vector<int64_t>& rows_per_expert) = 0;
  // send [R, C] in global expert order -> recv [received, C] local-expert-major (within an
  // expert, by source rank).
  virtual void dispatch(const ExchangePlan& p, const Tensor& send, const Tensor& recv) = 0;
  // The reverse movement: back [received, C] local-expert-major -> out [R, C] expert order.
  virtual void combine(const ExchangePlan& p, const Tensor& back, const Tensor& out) = 0;
};

// Every expert on this rank: the plan is the identity and rows are copied.
class LocalExchange final : public ExpertExchange {
 public:
  LocalExchange(Backend& backend, int64_t experts) : be_(backend), experts_(experts) {}
  int64_t first_expert() const override { return 0; }
  int64_t local_experts() const override { return experts_; }
  ExchangePlan plan(const std::vector<int64_t>& rows_per_expert) override;
  void dispatch(const ExchangePlan& p, const Tensor& send, const Tensor& recv) override;
  void combine(const ExchangePlan& p, const Tensor& back, const Tensor& out) override;

 private:
  Backend& be_;
  int64_t experts_;
};

struct MoeWeights {  // parameters or their gradients (same layout)
  RouterWeights router;
  MlpWeights shared;   // empty without shared experts
  Tensor gate, up;     // [E_local, FE, C]
  Tensor down;         // [E_local, C, FE]
  int64_t layer = -1;  // the global block: the experts follow their block's precision
};

// One micro-batch's state between its forward and its backward_weight.
struct MoeState {
  Routing routing;        // scores, gates carved (kept); choices on the host
  MlpActivations shared;  // carved (kept)
  Tensor dz;              // [N, E] router logit gradient (carved stash)
  MlpStash shared_stash;  // carved
  ExchangePlan plan;
  std::vector<int32_t> row_token;  // [R] token of each sent row, in expert order
  std::vector<int32_t> row_slot;   // [R] its assignment t * K + k
  Buffer y;                        // [R, C] expert outputs back at the routing rank
  Buffer xe, h, act;               // [received, C], [received, 2FE], [received, FE]
  Buffer dye, dh;                  // kept from backward_input for backward_weight
  double grad_scale = 0;           // dL/dloss per token, for the balance loss
};

class Moe {
 public:
  // exchange: nullptr for every expert on this rank.
  Moe(Backend& backend, const ParallelContext& ctx, const MoeConfig& config,
      ExpertExchange* exchange);

  // What a MoE layer keeps per slot (scores, gates, shared experts' activations) and stashes.
  void carve(Carver& kept, MoeState& s) const;
  void carve_stash(Carver& c, MoeState& s) const;

  // out[N, C] += the layer's output for the normed input x [N, C]. Under ctx.moe_slice: the
  // routed experts' output for this rank's rows only (N = ctx.moe_tokens()); the caller runs the
  // shared experts over the gathered rows with shared_forward.
  void forward(Tensor out, const Tensor& x, const MoeWeights& w, MoeState& s);
  // dx[N, C] = dL/dx from dout = dL/d(out) (uses s.grad_scale for the balance loss). Under
  // ctx.moe_slice: dx[N, C] += the routed experts' and router's part (dx holds the shared's).
  void backward_input(Tensor dx, const Tensor& dout, const MoeWeights& w, MoeState& s);
  // grads += weight gradients; frees the micro-batch's expert buffers (under ctx.moe_slice
  // without the shared experts': shared_backward_weight).
  void backward_weight(const MoeWeights& grads, const Tensor& x, const Tensor& dout, MoeState& s);

  // The shared experts alone, over all N = ctx.shape.tokens() rows (tp shards of their width):
  // out += Shared(x); dx = dL/dx; grads += their weight gradients.
  void shared_forward(Tensor out, const Tensor& x, const MoeWeights& w, MoeState& s);
  void shared_backward_input(Tensor dx, const Tensor& dout, const MoeWeights& w, MoeState& s);
  void shared_backward_weight(const MoeWeights& grads, const Tensor& x, const Tensor& dout,
                              MoeState& s);
  bool has_shared() const { return config_.n_shared_experts > 0; }
  // Frees a micro-batch's routed-expert rows (what backward_weight frees).
  static void release_rows(MoeState& s);
  // Full recompute: forward again into a throwaway output, refilling `s` (the routing, the
  // shared experts' activations, the expert rows: the dispatch and combine run again) bitwise as
  // forward did (the weights and routing biases do not change within a step).
  void recompute(const Tensor& x, const MoeWeights& w, MoeState& s);

  const Router& router() const { return router_; }
  int64_t expert_ffn() const { return config_.expert_ffn; }
  // The width of each routed expert this rank computes (FE, or FE / tp under ctx.experts_tp).
  int64_t expert_width() const {
    return config_.expert_ffn / (ctx_.experts_tp ? ctx_.tp_size() : 1);
  }

 private:
  Tensor expert_matrix(const Tensor& stacked, int64_t e) const;  // [E_local, r, c] -> [r, c]
  Backend& be_;
  const ParallelContext& ctx_;
  MoeConfig config_;
  std::unique_ptr<LocalExchange> local_;
  ExpertExchange* exchange_;
  MemoryTracker* tracker_ = nullptr;
  Router router_;
  Mlp shared_;

 public:
  // Where the per-micro-batch expert buffers are accounted (activations).
  void set_tracker(MemoryTracker& tracker) { tracker_ = &tracker; }
};

}  // namespace trillion
