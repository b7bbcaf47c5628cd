// Router of a MoE layer: which experts each token goes to and with what gate.
//
//   z = x Wr^T [N, E]
//   sigmoid_bias (DeepSeek-V3 2412.19437 §2.1.2): s = sigmoid(z); the top K of s + b are chosen
//     (b: a per-expert bias that only steers the choice and gets no gradient); gates are the
//     chosen s normalised to sum 1. After each step b_i -= gamma when expert i received more
//     than the mean load and += gamma when it received less (update_bias).
//   softmax_aux (Switch 2101.03961 / GShard): s = softmax(z); the top K of s are chosen, gates
//     are the chosen s normalised to sum 1.
//   Balance loss, per sequence of T tokens (DeepSeek-V3 eq. 17-19; for both routers):
//     L = alpha * sum_i f_i P_i,  f_i = E / (K T) * #(tokens of the sequence choosing i),
//     P_i = 1/T * sum_t s'_{t,i},  s' = s / sum_j s_j (sigmoid) or s (softmax).
//   It is a per-sequence term, so it does not depend on how a batch is split over ranks; the
//   objective adds its mean over the step's sequences (grad_scale * T per sequence). Under
//   context parallelism a rank holds T/cp tokens of each sequence: f's counts are summed over
//   the cp group in forward (one all-reduce of B * E f64), T is the whole length, and each rank's
//   balance_loss is its tokens' share of P, so the shares add over cp to the sequence's L.
//   Under ctx.moe_slice (tp with parallel.expert_tp = 1) a rank routes its N/tp sequence-parallel
//   rows of the micro-batch: f's counts add over tp the same way (one more B * E f64 all-reduce),
//   and its share of P covers those rows. Under ctx.experts_tp (parallel.expert_tp = tp) every tp
//   rank routes all N gathered rows identically, and takes its N/tp rows' share of dx and dWr.
//   Group-limited routing (sigmoid_bias; n_group = G, topk_group = M < G; DeepSeek-V3 §2.1.2
//   and its released config): experts are G contiguous groups of E/G by index (group g holds
//   g E/G .. (g+1) E/G - 1), each scored by the sum of its two largest keys s + b; a token keeps
//   the M best groups and chooses its top K among their M E/G experts. The groups depend on the
//   expert index only, so every layout (ep, tp, cp, dp, pp) routes as the one-process run; with
//   E/G experts per ep rank a group is a rank's experts and a token reaches at most M ranks.
//   Capacity (capacity_factor cf > 0, Switch): expert i takes at most ceil(cf * N * K / E) of this
//   rank's assignments, in token order; the rest are dropped (their gate is lost, not
//   renormalised) and counted.
// The [N, E] routing maths runs on the host over the tensors' memory (the CPU backend's), with
// the logits' GEMMs on the backend. Ties break towards the lower expert index.
#pragma once

#include <utility>
#include <vector>

#include "model/carver.h"
#include "model/config.h"
#include "model/parallel_context.h"

namespace trillion {

struct RouterWeights {
  Tensor router;  // [E, C]
  Tensor bias;    // [E]; empty for softmax_aux (and for gradients)
};

// One micro-batch's routing, kept from forward for backward.
struct Routing {
  Tensor scores;                // [N, E] s (sigmoid or softmax)
  Tensor gates;                 // [N, K] gate of each chosen expert (0 for a dropped one)
  std::vector<int32_t> expert;  // [N * K] chosen expert of assignment t * K + k
  std::vector<char> dropped;    // [N * K] over capacity
  std::vector<double> f;        // [B * E] balance-loss f of each (whole) sequence and expert
  int64_t dropped_count = 0;
  double balance_loss = 0;  // sum over this micro-batch's sequences of L (cp: this rank's share)
};

class Router {
 public:
  Router(Backend& backend, const ParallelContext& ctx, const MoeConfig& config);

  // Carves scores [N, E] and gates [N, K] from `kept`.
  void carve(Carver& kept, Routing& r) const;
  Tensor carve_stash(Carver& c) const;  // dz [N, E]

  // Routes the normed input x [N, C] of batch rows of `seq` tokens each.
  void forward(const Tensor& x, const RouterWeights& w, Routing& r);
  // dz [N, E] from dL/dgate (dgates [N * K], per assignment) and the balance loss scaled by
  // grad_scale; dx [N, C] += dz Wr.
  void backward_input(Tensor dx, const Tensor& dz, const std::vector<double>& dgates,
                      const RouterWeights& w, const Routing& r, double grad_scale);
  void backward_weight(Tensor drouter, const Tensor& x, const Tensor& dz);

  // Token counts per expert of the routing (dropped assignments excluded), added to `loads`.
  void count_loads(const Routing& r, std::vector<double>& loads) const;
  // The aux-loss-free balancing rule on the bias, from the step's global loads per expert.
  static void update_bias(const Tensor& bias, const std::vector<double>& loads, double rate);

 private:
  // The rows whose dz reaches dx and dWr on this rank (all of them, but a 1/tp share of the
  // identical rows every tp rank routes under ctx.experts_tp).
  std::pair<int64_t, int64_t> gradient_rows() const;

  Backend& be_;
  const ParallelContext& ctx_;
  MoeConfig config_;
};

}  // namespace trillion
