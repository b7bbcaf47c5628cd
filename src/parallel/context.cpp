// See context.h.
#include "parallel/context.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/timer.h"
#include "plan/context_ring.h"

namespace trillion::parallel {

int64_t visible_pairs(const AttentionSpan& q, const AttentionSpan& k) {
  int64_t n = 0;
  for (int64_t i = 0; i < q.len; ++i) {
    n += std::clamp<int64_t>(q.position + i - k.position + 1, 0, k.len);
  }
  return n;
}

int64_t visible_pairs(const AttentionSpan& q, const AttentionSpan& k, const DocumentMask& documents,
                      int64_t batch) {
  if (!documents.on()) return batch * visible_pairs(q, k);
  int64_t n = 0;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < q.len; ++i) {
      const int64_t p = q.position + i;
      const int64_t lo = std::max(documents.first_key(b, p), k.position);
      const int64_t hi = std::min(p, k.position + k.len - 1);
      n += std::max<int64_t>(hi - lo + 1, 0);
    }
  }
  return n;
}

namespace {
// Whether a key of span k is visible to a query of span q in some batch row.
bool any_visible(const AttentionSpan& q, const AttentionSpan& k, const DocumentMask& documents,
                 int64_t batch) {
  if (k.position > q.position + q.len - 1) return false;
  for (int64_t b = 0; b < batch; ++b) {
    if (k.position + k.len - 1 >= documents.first_key(b, q.position)) return true;
  }
  return false;
}
}  // namespace

RingAttention::RingAttention(Backend& backend, MemoryTracker& tracker, comm::Communicator& cp,
                             SequenceSplit split, const LocalShape& shape, int64_t seq_len,
                             DType dtype, AttentionBlocks blocks)
    : RingAttention(backend, tracker, cp, split, shape.attention(), seq_len, dtype, blocks) {}

RingAttention::RingAttention(Backend& backend, MemoryTracker& tracker, comm::Communicator& cp,
                             SequenceSplit split, const AttentionShape& shape, int64_t seq_len,
                             DType dtype, AttentionBlocks blocks, int64_t latent_width)
    : be_(backend),
      ring_(cp),
      split_(split),
      shape_(shape),
      seq_len_(seq_len),
      blocks_(blocks),
      latent_(latent_width) {
  TRILLION_CHECK(cp.size() > 1, "RingAttention: one process attends with the local kernel");
  TRILLION_CHECK(split.cp == cp.size() && shape.T * cp.size() == seq_len,
                 "RingAttention: the split, the cp group and the local shape disagree");
  split_.spans(seq_len, cp.rank());  // throws the user-facing error if T does not cut evenly
  const int64_t N = shape_.B * shape_.T, H = shape_.kv_width();  // K | V: KV*HD + KV*VD
  const int64_t W = latent_ > 0 ? latent_ : H;                   // what travels
  buffers_ =
      Buffer(tracker, MemoryCategory::workspace, dtype, 5 * N * W + (latent_ > 0 ? 2 * N * H : 0));
  for (int i = 0; i < 2; ++i) kv_[i] = buffers_.view(i * N * W, {N, W});
  for (int i = 0; i < 3; ++i) dkv_[i] = buffers_.view((2 + i) * N * W, {N, W});
  if (latent_ > 0) {
    up_ = buffers_.view(5 * N * W, {N, H});
    d_up_ = buffers_.view(5 * N * W + N * H, {N, H});
  }
}

template <typename F>
void RingAttention::for_pairs(int source, const DocumentMask& documents, RingPassCounts& counts,
                              F&& f) {
  for (const AttentionSpan& q : split_.spans(seq_len_, ring_.rank())) {
    for (const AttentionSpan& k : split_.spans(seq_len_, source)) {
      if (!any_visible(q, k, documents, shape_.B)) {  // every key after or before every query
        ++counts.blocks_skipped;
        continue;
      }
      f(q, k);
      const int64_t pairs = visible_pairs(q, k, documents, shape_.B);
      counts.visible_pairs_batch += pairs;
      counts.visible_pairs += pairs / shape_.B;
      ++counts.blocks_computed;
      ring_.progress();
    }
  }
}

void RingAttention::ring_forward(Tensor out, Tensor lse, const Tensor& qkv,
                                 const AttentionShape& shape, const DocumentMask& documents,
                                 const StepKeys& keys, const char* pass) {
  const int cp = ring_.size();
  be_.fill(out, 0.0);
  be_.fill(lse, -std::numeric_limits<double>::infinity());
  ++counters_.forward.calls;
  const uint64_t sent_before = ring_.bytes_sent();
  for (int step = 0; step < cp; ++step) {
    const Tensor& cur = kv_[step % 2];
    if (step + 1 < cp) start(cur, kv_[(step + 1) % 2], RingStream::kv);
    Timer t;
    const Tensor& k = keys(step, cur);
    for_pairs(ring_.source_after(step), documents, counters_.forward,
              [&](const AttentionSpan& qs, const AttentionSpan& ks) {
                be_.flash_attention_block_forward(out, lse, qkv, k, shape, qs, ks, blocks_);
              });
    counters_.compute_seconds += t.seconds();
    counters_.wait_seconds += ring_.wait();
  }
  check_bytes(ring_.bytes_sent() - sent_before, plan::context_ring_bytes(cp, block_bytes()).forward,
              pass);
}

const Tensor& RingAttention::ring_backward(
    Tensor dqkv, const Tensor& dout, const Tensor& out, const Tensor& qkv, const Tensor& lse,
    const AttentionShape& shape, const DocumentMask& documents, const StepKeys& keys,
    const std::function<const Tensor&(const Tensor& mine)>& grad_target,
    const std::function<void(const Tensor& block, const Tensor& mine)>& fold, const char* pass) {
  const int cp = ring_.size();
  be_.fill(dqkv, 0.0);
  ++counters_.backward.calls;
  const uint64_t sent_before = ring_.bytes_sent();
  // dkv_[2] receives the accumulator arriving from the previous rank; dkv_[step % 2] is this
  // step's (and, once sent, must stay untouched until the next wait: it was last sent two steps
  // ago, and that send is done).
  const Tensor& arriving = dkv_[2];
  for (int step = 0; step < cp; ++step) {
    const Tensor& cur = kv_[step % 2];
    const Tensor& mine = dkv_[step % 2];
    if (step + 1 < cp) start(cur, kv_[(step + 1) % 2], RingStream::kv);
    Timer t;
    const Tensor& k = keys(step, cur);
    const Tensor& dk = grad_target(mine);
    be_.fill(dk, 0.0);
    for_pairs(ring_.source_after(step), documents, counters_.backward,
              [&](const AttentionSpan& qs, const AttentionSpan& ks) {
                be_.flash_attention_block_backward(dqkv, dk, dout, out, qkv, k, lse, shape, qs, ks,
                                                   blocks_);
              });
    fold(cur, mine);
    counters_.compute_seconds += t.seconds();
    // Both the next K/V block and the accumulator of this step's block (from the previous rank,
    // which held the same block one step earlier) have arrived after this wait.
    counters_.wait_seconds += ring_.wait();
    if (step > 0) be_.add(mine, arriving);
    start(mine, arriving, RingStream::dkv);
  }
  counters_.wait_seconds += ring_.wait();
  check_bytes(ring_.bytes_sent() - sent_before,
              plan::context_ring_bytes(cp, block_bytes()).backward, pass);
  // The accumulator arriving last is this rank's own block, with every rank's contribution.
  return arriving;
}

void RingAttention::forward(Tensor out, Tensor lse, const Tensor& qkv,
                            const DocumentMask& documents) {
  AttentionShape shape = shape_;
  shape.documents = documents;
  be_.copy(kv_[0], kv_of(qkv));
  ring_forward(
      out, lse, qkv, shape, documents,
      [](int, const Tensor& block) -> const Tensor& { return block; }, "forward");
}

void RingAttention::backward(Tensor dqkv, const Tensor& dout, const Tensor& out, const Tensor& qkv,
                             const Tensor& lse, const DocumentMask& documents) {
  AttentionShape shape = shape_;
  shape.documents = documents;
  be_.copy(kv_[0], kv_of(qkv));
  const Tensor& own = ring_backward(
      dqkv, dout, out, qkv, lse, shape, documents,
      [](int, const Tensor& block) -> const Tensor& { return block; },
      [](const Tensor& mine) -> const Tensor& { return mine; }, [](const Tensor&, const Tensor&) {},
      "backward");
  be_.copy(kv_of(dqkv), own);
}

// The latent ring's K/V of a step: this rank's own K/V (already up-projected) at step 0, else the
// arrived latent block up-projected with this rank's Wkv_b.
RingAttention::StepKeys RingAttention::latent_keys(const Tensor& qkv, const LatentKeys& keys) {
  return [this, &qkv, &keys](int step, const Tensor& block) -> const Tensor& {
    if (step == 0) {
      be_.copy(up_, kv_of(qkv));
    } else {
      keys.up(block, up_);
    }
    return up_;
  };
}

void RingAttention::forward_latent(Tensor out, Tensor lse, const Tensor& qkv,
                                   const Tensor& ckv_norm, const Tensor& k_rope,
                                   const LatentKeys& keys, const DocumentMask& documents) {
  TRILLION_CHECK(latent_ > 0 && ckv_norm.size(1) + k_rope.size(1) == latent_,
                 "RingAttention::forward_latent: not built for this latent");
  AttentionShape shape = shape_;
  shape.documents = documents;
  const int64_t dc = ckv_norm.size(1);
  be_.copy(kv_[0].columns(0, dc), ckv_norm);
  be_.copy(kv_[0].columns(dc, latent_), k_rope);
  ring_forward(out, lse, qkv, shape, documents, latent_keys(qkv, keys), "forward (latent)");
}

void RingAttention::backward_latent(Tensor dqkv, Tensor d_ckv_norm, Tensor d_k_rope,
                                    const Tensor& dout, const Tensor& out, const Tensor& qkv,
                                    const Tensor& ckv_norm, const Tensor& k_rope, const Tensor& lse,
                                    const LatentKeys& keys, const DocumentMask& documents) {
  TRILLION_CHECK(latent_ > 0 && ckv_norm.size(1) + k_rope.size(1) == latent_,
                 "RingAttention::backward_latent: not built for this latent");
  AttentionShape shape = shape_;
  shape.documents = documents;
  const int64_t dc = ckv_norm.size(1);
  be_.copy(kv_[0].columns(0, dc), ckv_norm);
  be_.copy(kv_[0].columns(dc, latent_), k_rope);
  // The up-projected block's dK/dV go to d_up_; this rank's queries' share of the block's latent
  // gradient (and of Wkv_b's wgrad) is what travels.
  const Tensor& own = ring_backward(
      dqkv, dout, out, qkv, lse, shape, documents, latent_keys(qkv, keys),
      [this](const Tensor&) -> const Tensor& { return d_up_; },
      [this, &keys](const Tensor& block, const Tensor& mine) { keys.down(d_up_, block, mine); },
      "backward (latent)");
  be_.copy(d_ckv_norm, own.columns(0, dc));
  be_.copy(d_k_rope, own.columns(dc, latent_));
}

void RingAttention::start(const Tensor& send, const Tensor& recv, RingStream stream) {
  ring_.start(send, recv, stream);
  if (serialized_) counters_.wait_seconds += ring_.wait();
}

void RingAttention::check_bytes(uint64_t sent, uint64_t formula, const char* pass) const {
  TRILLION_CHECK(sent == formula, fmt::format("ring attention {}: sent {} bytes over the cp group, "
                                              "plan/context_ring.h says {}",
                                              pass, sent, formula));
}

uint64_t RingAttention::block_bytes() const {
  return static_cast<uint64_t>(kv_[0].numel()) * dtype_size(kv_[0].dtype());
}

double RingAttention::forward_flops() const {
  return 2.0 * static_cast<double>(shape_.NH * (shape_.HD + shape_.v_dim())) *
         static_cast<double>(counters_.forward.visible_pairs_batch);
}

Tensor RingAttention::kv_of(const Tensor& qkv) const {
  const int64_t q = shape_.NH * shape_.HD;
  return qkv.columns(q, q + shape_.kv_width());
}

}  // namespace trillion::parallel
