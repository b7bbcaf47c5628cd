// Multi-token prediction (DeepSeek-V3 2412.19437 §2.2): D sequential modules on the head's stage.
// Module k = 1..D, at position i of a sequence:
//   h'_i^k = M_k [RMSNorm_e(Emb(t_{i+k})) ; RMSNorm_h(h_i^{k-1})]     M_k = eh_proj [C, 2C]
//   h^k = Block_k(h'^k),  P^k = softmax(Head(RMSNorm_f(h^k)))          predicts t_{i+k+1}
// h^0 is the main model's last block output (before the final norm); Emb and Head are the main
// model's (shared: their gradients accumulate into the main model's), each module has its own
// enorm, hnorm, eh_proj, block and final norm (mtp.{k-1}.* in the parameter table). The columns of
// eh_proj follow the released checkpoint: [0, C) act on the embedding, [C, 2C) on the hidden state.
// Loss sums per depth: L_k = sum over positions of CE^k; positions whose target t_{i+k+1} runs past
// the sequence, is ignored, or whose token t_{i+k} lies in another document (document masking)
// are ignored (kIgnoredTarget). The objective adds (lambda / D) sum_k L_k: the stage passes
// backward scale = its grad_scale * lambda / D (StageModel::set_mtp_loss_weight).
//
// Order of accumulation (so backward() and backward_input() + backward_weight() agree bitwise):
// modules D..1; within one, the head's weight, the block's weights, eh_proj, the norms, then the
// embedding scatter. dh0 += dL/dh^0 (the stage's running residual gradient).
//
// The block is a MoE block when the model's last layer is one (DeepSeek-V3 §2.2: the module's
// block is like the main model's): it is a MoE layer like the others (its experts over ep, its
// balance loss in the objective with the main layers' weight, its routing statistics and bias
// update as layer L + k); moe_state(slot, k) is its micro-batch state.
// Tensor parallelism without SP: every [N, C] tensor is whole on each rank, the block, embedding
// and head run their tp shards. With sequence parallelism the modules' residual tensors (h^k,
// the embeddings, their norms, the block input) hold the rank's Nr = N/tp rows, as the main
// model's: the hidden rows never shift, and every tp rank holds the micro-batch's whole token
// ids and targets, so the embedding looks up the shifted tokens of all N rows and
// reduce-scatters (its SP path, scratch `full`), the head gathers and computes the loss of every
// row; the replicated weights' gradients (norms, eh_proj) are then partial over tp and summed by
// the tp reduction of replicated gradients, as the main blocks' norms. Under context parallelism
// (any split) the rank's rows are positions of the whole sequence: set_targets all-gathers the
// micro-batch's targets over cp (N ints per rank), so each row's shifted token and target come
// from the whole sequence; the hidden rows never move, and the block runs its ring attention as
// the main layers do.
// See model/glossary.h for letters.
#pragma once

#include <cstdint>
#include <vector>

#include "model/block.h"
#include "model/embedding.h"
#include "model/lm_head.h"

namespace trillion {

struct MtpWeights {     // module k's parameters or gradients (same layout)
  Tensor enorm, hnorm;  // [C]
  Tensor eh_proj;       // [C, 2C]
  BlockWeights block;
  Tensor final_norm;  // [C]
};

struct MtpShared {  // the main model's tensors the modules use (parameters or gradients)
  Tensor embed;     // [V, C]
  Tensor head;      // [V, C] (embed when tied)
};

class Mtp {
 public:
  // Allocates `slots` micro-batches' activations and stashes (counted by `tracker`).
  // moe: the MoE module when the blocks are MoE blocks (nullptr: dense blocks).
  Mtp(int64_t depth, double norm_eps, const ParallelContext& ctx, Block& block, LmHead& head,
      Embedding& embedding, Backend& backend, MemoryTracker& tracker, DType dtype, int slots,
      Moe* moe = nullptr);

  int64_t depth() const { return depth_; }
  bool moe() const { return moe_ != nullptr; }
  // Module k's (0-based) MoE state of the slot's micro-batch (MoE blocks only).
  MoeState& moe_state(int slot, size_t k) { return moe_states_.at(slot).at(k); }
  const MoeState& moe_state(int slot, size_t k) const { return moe_states_.at(slot).at(k); }
  // The micro-batch's main targets [N] (B rows of T; targets[i] = t_{i+1}) give every module's
  // tokens and targets (under cp: collective over cp); starts (document masking, [B, T cp];
  // nullptr: none) mask targets whose token lies in another document and set every module's
  // attention mask.
  void set_targets(int slot, const int32_t* targets);
  void set_documents(int slot, const DocumentMask& mask);
  // The precision recipe's site of module k is layer L + k.
  void set_site(int64_t first_layer) { first_layer_ = first_layer; }
  // SP: the [N, C] scratch of the embedding's reduce-scatter and gather (the stage's).
  void set_tp_full(Tensor full) { full_ = full; }

  // Runs modules 1..D on h0 [N, C]; losses(slot)[k - 1] = sum over positions of CE^k.
  void forward(int slot, int64_t microbatch, const Tensor& h0, const std::vector<MtpWeights>& w,
               const MtpShared& shared, const Tensor& cos_sin);
  const std::vector<double>& losses(int slot) const { return losses_.at(slot); }
  // dgrad of every module: dh0 += dL/dh^0, where dL/dCE^k_i = scale (= grad_scale * lambda / D);
  // a MoE block's balance loss has the main layers' weight (its MoeState::grad_scale, set by the
  // caller).
  void backward_input(int slot, int64_t microbatch, const Tensor& h0, Tensor dh0,
                      const std::vector<MtpWeights>& w, const MtpShared& shared,
                      const BlockScratch& scratch, const Tensor& cos_sin, double scale);
  // wgrad of every module (after backward_input of the slot).
  void backward_weight(int slot, const std::vector<MtpWeights>& grads,
                       const std::vector<MtpWeights>& w, const MtpShared& shared_grads,
                       const MtpShared& shared, const Tensor& h0, double scale);

 private:
  struct Module {             // one module's activations and stash for one micro-batch
    Tensor emb;               // [N, C] Emb(t_{i+k})
    Tensor e_normed, e_rstd;  // [N, C], [N]
    Tensor h_normed, h_rstd;  // [N, C], [N] (RMSNorm of h^{k-1})
    BlockActivations block;   // block.x = M_k [e_normed ; h_normed], block.out = h^k
    LmHeadActivations head;
    BlockStash stash;
    Tensor d_head_normed;                  // [N, C] the head's d_normed
    Tensor d_x;                            // [N, C] dL/d(block.x)
    Tensor d_e_normed, d_h_normed, d_emb;  // [N, C]
  };
  void carve(Carver& kept, Carver& work);
  void derive_targets(int slot);
  const Tensor& input_of(int slot, size_t k, const Tensor& h0) const {
    return k == 0 ? h0 : modules_[slot][k - 1].block.out;
  }
  void name_site(int64_t microbatch, size_t k) const;

  const ParallelContext& ctx_;
  Block& block_;
  LmHead& head_;
  Embedding& embedding_;
  Moe* moe_;
  Backend& be_;
  int64_t depth_;
  double eps_;
  int64_t first_layer_ = 0;
  Buffer kept_, work_;
  std::vector<std::vector<Module>> modules_;       // [slot][k]
  std::vector<std::vector<MoeState>> moe_states_;  // [slot][k] (MoE blocks)
  // Module k + 1's inputs at position i: the token t_{i+k+1} (0 where there is none) and the
  // target t_{i+k+2} (or kIgnoredTarget), derived at forward from the main targets.
  std::vector<std::vector<std::vector<int32_t>>> tokens_, targets_;  // [slot][k][N]
  // [slot][B*T cp]: the whole sequences' main targets and document starts.
  std::vector<std::vector<int32_t>> main_targets_, starts_;
  std::vector<int64_t> positions_;  // [T] the rank's rows' positions in the whole sequence
  std::vector<std::vector<double>> losses_;                          // [slot][k]
  Tensor dres_;  // [N, C] the running gradient dL/dh^k of backward_input (shared)
  Tensor full_;  // [N, C] SP only: the embedding's scratch
};

}  // namespace trillion
