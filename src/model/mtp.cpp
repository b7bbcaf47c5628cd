// See mtp.h.
#include "model/mtp.h"

#include <fmt/format.h>

#include "core/error.h"
#include "model/linear_gemm.h"

namespace trillion {

Mtp::Mtp(int64_t depth, double norm_eps, const ParallelContext& ctx, Block& block, LmHead& head,
         Embedding& embedding, Backend& backend, MemoryTracker& tracker, DType dtype, int slots,
         Moe* moe)
    : ctx_(ctx),
      block_(block),
      head_(head),
      embedding_(embedding),
      moe_(moe),
      be_(backend),
      depth_(depth),
      eps_(norm_eps) {
  // Under tp without SP every [N, C] tensor is whole on each rank: the block, the embedding and
  // the head run their tp shards as the main model's do; the norms and eh_proj are replicated and
  // get the same gradient on every rank. Under SP the residual tensors hold the rank's Nr rows
  // (see mtp.h). Under cp the rank's rows sit at positions_ of the whole sequence.
  positions_ = ctx.sequence.positions(ctx.shape.seq * ctx.sequence.cp, ctx.cp_rank);
  modules_.assign(slots, std::vector<Module>(depth));
  if (moe != nullptr) {
    moe_states_.resize(slots);
    for (auto& per_slot : moe_states_) per_slot.resize(depth);
  }
  tokens_.assign(slots, std::vector<std::vector<int32_t>>(depth));
  targets_ = tokens_;
  main_targets_.resize(slots);
  starts_.resize(slots);
  losses_.assign(slots, std::vector<double>(depth, 0.0));
  Carver count_kept, count_work;
  carve(count_kept, count_work);
  kept_ = Buffer(tracker, MemoryCategory::activations, dtype, count_kept.used());
  work_ = Buffer(tracker, MemoryCategory::workspace, dtype, count_work.used());
  Carver take_kept(kept_), take_work(work_);
  carve(take_kept, take_work);
}

void Mtp::carve(Carver& kept, Carver& work) {
  const int64_t N = ctx_.residual_tokens(), C = ctx_.shape.d_model;  // SP: the rank's rows
  for (size_t slot = 0; slot < modules_.size(); ++slot) {
    for (size_t k = 0; k < modules_[slot].size(); ++k) {
      Module& m = modules_[slot][k];
      MoeState* moe = moe_ != nullptr ? &moe_states_[slot][k] : nullptr;
      m.emb = kept.take({N, C});
      m.e_normed = kept.take({N, C});
      m.e_rstd = kept.take({N});
      m.h_normed = kept.take({N, C});
      m.h_rstd = kept.take({N});
      // Nothing is recomputed (LayerRecompute::none); under SP the block's partial sum is
      // workspace.
      m.block = block_.carve(kept, work, LayerRecompute::none, moe);
      m.block.x = kept.take({N, C});
      m.head = head_.carve(kept);
      m.stash = block_.carve_stash(work);
      if (moe != nullptr) moe_->carve_stash(work, *moe);
      m.d_head_normed = work.take({N, C});
      m.d_x = work.take({N, C});
      m.d_e_normed = work.take({N, C});
      m.d_h_normed = work.take({N, C});
      m.d_emb = work.take({N, C});
    }
  }
  dres_ = work.take({N, C});
}

void Mtp::set_targets(int slot, const int32_t* targets) {
  const int64_t N = ctx_.shape.tokens(), cp = ctx_.sequence.cp;
  std::vector<int32_t>& whole = main_targets_.at(slot);
  if (cp == 1) {
    whole.assign(targets, targets + N);
    return;
  }
  // Context parallelism: the whole sequences' targets [B, T cp] from every cp rank's rows (one
  // all-gather of N values per rank; every cp rank sets the same micro-batch's targets in turn).
  const int64_t B = ctx_.shape.batch, T = ctx_.shape.seq, Tw = T * cp;
  std::vector<double> mine(targets, targets + N), all(N * cp);
  ctx_.cp->all_gather(Tensor(mine.data(), DType::f64, {N}),
                      Tensor(all.data(), DType::f64, {N * cp}));
  whole.assign(B * Tw, kIgnoredTarget);
  for (int r = 0; r < cp; ++r) {
    const std::vector<int64_t> at = ctx_.sequence.positions(Tw, r);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < T; ++t)
        whole[b * Tw + at[t]] = static_cast<int32_t>(all[r * N + b * T + t]);
    }
  }
}

void Mtp::set_documents(int slot, const DocumentMask& mask) {
  std::vector<int32_t>& starts = starts_.at(slot);
  starts.clear();
  if (mask.on()) {
    const int64_t whole = ctx_.shape.seq * ctx_.sequence.cp;
    TRILLION_CHECK(mask.stride == whole, "MTP document starts cover one whole sequence row");
    starts.assign(mask.start, mask.start + ctx_.shape.batch * whole);
  }
  DocumentMask own = mask;
  if (mask.on()) own.start = starts.data();
  for (Module& m : modules_[slot]) m.block.attn.documents = own;
}

// Row n = b T + i of this rank is position p = positions_[i] of sequence b; main and starts hold
// the whole sequences (Tw = T cp positions each).
void Mtp::derive_targets(int slot) {
  const int64_t B = ctx_.shape.batch, T = ctx_.shape.seq, Tw = T * ctx_.sequence.cp;
  const std::vector<int32_t>& main = main_targets_[slot];
  const std::vector<int32_t>& starts = starts_[slot];
  TRILLION_CHECK(!main.empty(), "MTP forward before set_targets");
  for (int64_t k = 0; k < depth_; ++k) {
    std::vector<int32_t>& tok = tokens_[slot][k];
    std::vector<int32_t>& tgt = targets_[slot][k];
    tok.assign(B * T, 0);
    tgt.assign(B * T, kIgnoredTarget);
    for (int64_t b = 0; b < B; ++b) {
      const int32_t* row = main.data() + b * Tw;
      for (int64_t i = 0; i < T; ++i) {
        const int64_t n = b * T + i, p = positions_[i], at = p + k;  // row[at] is t_{p+k+1}
        if (at >= Tw || row[at] == kIgnoredTarget) continue;
        tok[n] = row[at];
        // Module k + 1 predicts t_{p+k+2}: the main target at p + k + 1, from the same document.
        if (at + 1 >= Tw || row[at + 1] == kIgnoredTarget) continue;
        if (!starts.empty() && starts[b * Tw + at + 1] != starts[b * Tw + p]) continue;
        tgt[n] = row[at + 1];
      }
    }
  }
}

void Mtp::name_site(int64_t microbatch, size_t k) const {
  if (ctx_.precision != nullptr) {
    ctx_.precision->set_site(microbatch, first_layer_ + static_cast<int64_t>(k));
  }
}

void Mtp::forward(int slot, int64_t microbatch, const Tensor& h0, const std::vector<MtpWeights>& w,
                  const MtpShared& shared, const Tensor& cos_sin) {
  derive_targets(slot);
  const int64_t C = ctx_.shape.d_model, N = ctx_.shape.tokens();
  std::vector<double> host(N);
  for (size_t k = 0; k < static_cast<size_t>(depth_); ++k) {
    Module& m = modules_[slot][k];
    name_site(microbatch, k);
    embedding_.forward(m.emb, tokens_[slot][k].data(), shared.embed, full_);
    be_.rmsnorm_forward(m.e_normed, m.e_rstd, m.emb, w[k].enorm, eps_);
    be_.rmsnorm_forward(m.h_normed, m.h_rstd, input_of(slot, k, h0), w[k].hnorm, eps_);
    // h' = [e ; h] M^T = e M[:, :C]^T + h M[:, C:]^T
    be_.gemm(m.block.x, false, true, m.e_normed, w[k].eh_proj.columns(0, C), 1.0, 0.0);
    be_.gemm(m.block.x, false, true, m.h_normed, w[k].eh_proj.columns(C, 2 * C), 1.0, 1.0);
    block_.forward(w[k].block, m.block, cos_sin);
    head_.forward(m.block.out, {w[k].final_norm, shared.head}, m.head, targets_[slot][k].data());
    be_.copy(Tensor(host.data(), DType::f64, {N}), m.head.losses);
    double sum = 0;
    for (double x : host) sum += x;
    losses_[slot][k] = sum;
  }
}

void Mtp::backward_input(int slot, int64_t microbatch, const Tensor& h0, Tensor dh0,
                         const std::vector<MtpWeights>& w, const MtpShared& shared,
                         const BlockScratch& scratch, const Tensor& cos_sin, double scale) {
  const int64_t C = ctx_.shape.d_model;
  be_.fill(dres_, 0.0);  // dL/dh^D: only module D's own head reads h^D
  for (size_t k = static_cast<size_t>(depth_); k-- > 0;) {
    Module& m = modules_[slot][k];
    name_site(microbatch, k);
    // dres holds dL/dh^k without module k's head; its head adds its part, the block takes it to
    // dL/dh'^k.
    head_.backward_input(dres_, m.d_head_normed, m.block.out, {w[k].final_norm, shared.head},
                         m.head, targets_[slot][k].data(), scale);
    block_.backward_input(dres_, w[k].block, m.block, m.stash, scratch, cos_sin);
    be_.copy(m.d_x, dres_);
    be_.gemm(m.d_e_normed, false, false, m.d_x, w[k].eh_proj.columns(0, C), 1.0, 0.0);
    be_.gemm(m.d_h_normed, false, false, m.d_x, w[k].eh_proj.columns(C, 2 * C), 1.0, 0.0);
    be_.fill(m.d_emb, 0.0);
    be_.rmsnorm_backward_input(m.d_emb, m.d_e_normed, m.emb, w[k].enorm, m.e_rstd);
    // dL/dh^{k-1} from this module: h^0's goes into the stage's stream (+=), the others start
    // module k - 1's running gradient.
    if (k > 0) be_.fill(dres_, 0.0);
    be_.rmsnorm_backward_input(k == 0 ? dh0 : dres_, m.d_h_normed, input_of(slot, k, h0),
                               w[k].hnorm, m.h_rstd);
  }
}

void Mtp::backward_weight(int slot, const std::vector<MtpWeights>& d,
                          const std::vector<MtpWeights>& w, const MtpShared& shared_grads,
                          const MtpShared& shared, const Tensor& h0, double scale) {
  const int64_t C = ctx_.shape.d_model;
  for (size_t k = static_cast<size_t>(depth_); k-- > 0;) {
    Module& m = modules_[slot][k];
    head_.backward_weight({d[k].final_norm, shared_grads.head}, m.d_head_normed, m.block.out,
                          {w[k].final_norm, shared.head}, m.head, targets_[slot][k].data(), scale);
    block_.backward_weight(d[k].block, m.block, m.stash);
    be_.gemm(d[k].eh_proj.columns(0, C), true, false, m.d_x, m.e_normed, 1.0, 1.0);
    be_.gemm(d[k].eh_proj.columns(C, 2 * C), true, false, m.d_x, m.h_normed, 1.0, 1.0);
    be_.rmsnorm_backward_weight(d[k].enorm, m.d_e_normed, m.emb, m.e_rstd);
    be_.rmsnorm_backward_weight(d[k].hnorm, m.d_h_normed, input_of(slot, k, h0), m.h_rstd);
    embedding_.backward_weight(shared_grads.embed, tokens_[slot][k].data(), m.d_emb, full_);
  }
}

}  // namespace trillion
