// See tied_embedding.h.
#include "parallel/pipeline/tied_embedding.h"

#include <fmt/format.h>

#include <cstring>

#include "backend/backend.h"
#include "core/error.h"

namespace trillion::parallel {

namespace {

// Tags far above the pipeline executor's (micro-batch, boundary, direction) ones.
constexpr int kGradientTag = 1 << 24;
constexpr int kWeightsTag = kGradientTag + 1;

bool writes_gradients(Pass p) {
  return p == Pass::backward || p == Pass::backward_weight;
}

// The segments of the table's spec in a ZeRO-2/3 instance: this rank's chunk of it.
std::vector<OptimSegment> pieces_of(const DataParallel* dp, int spec) {
  std::vector<OptimSegment> pieces;
  if (dp == nullptr) return pieces;
  for (const OptimSegment& s : dp->segments()) {
    if (s.spec == spec) pieces.push_back(s);
  }
  return pieces;
}

int64_t elements_of(const std::vector<OptimSegment>& pieces) {
  int64_t n = 0;
  for (const OptimSegment& s : pieces) n += s.length;
  return n;
}

}  // namespace

TiedEmbedding::TiedEmbedding(End end, ParameterSet& params, comm::Communicator& pp, int peer,
                             int unit, int64_t passes, Backend& backend, MemoryTracker& tracker,
                             DataParallel* sharded)
    : end_(end),
      params_(params),
      pp_(pp),
      peer_(peer),
      unit_(unit),
      passes_(passes),
      be_(backend),
      sharded_(sharded),
      pieces_(pieces_of(sharded, params.table().index("embed"))),
      staging_(tracker, MemoryCategory::workspace,
               sharded != nullptr ? sharded->optimizer_grads().dtype() : params.dtype(),
               sharded != nullptr ? elements_of(pieces_)
                                  : params.table().spec(params.table().index("embed")).numel()) {
  TRILLION_CHECK(passes > 0, "the tied embedding's unit runs no backward pass on this rank");
  if (sharded_ == nullptr) params_.hooks().add(this);
}

TiedEmbedding::~TiedEmbedding() {
  if (sharded_ == nullptr) params_.hooks().remove(this);
  if (sending_) sending_->wait();
}

void TiedEmbedding::after(int unit, Pass pass, Use use) {
  if (unit != unit_ || use == Use::borrowed || !writes_gradients(pass)) return;
  if (++finished_ < passes_) return;
  finished_ = 0;
  const Tensor grad = params_.grad("embed");
  const Tensor staged = staging_.view(0, {grad.numel()});
  if (end_ == End::last) {
    be_.copy(staged, grad.view({grad.numel()}));
    be_.fill(grad, 0.0);
    sending_ = pp_.start_send(staged, peer_, kGradientTag);
  } else {
    pp_.recv(staged, peer_, kGradientTag);
    be_.add(grad.view({grad.numel()}), staged);
  }
}

void TiedEmbedding::finish_gradients() {
  if (sharded_ != nullptr) {
    // The two ends' chunks r of the table's gradient, each reduced over its own dp group.
    const Buffer& grads = sharded_->optimizer_grads();
    int64_t at = 0;
    if (end_ == End::first) pp_.recv(staging_.flat(), peer_, kGradientTag);
    for (const OptimSegment& s : pieces_) {
      const Tensor grad = grads.view(s.grad_offset, {s.length});
      const Tensor staged = staging_.view(at, {s.length});
      if (end_ == End::first) {
        be_.add(grad, staged);
      } else {
        be_.copy(staged, grad);
        be_.fill(grad, 0.0);  // counted once, in the first stage's norm and update
      }
      at += s.length;
    }
    if (end_ == End::last) pp_.send(staging_.flat(), peer_, kGradientTag);
    return;
  }
  if (sending_) {
    sending_->wait();
    sending_.reset();
  }
}

void TiedEmbedding::copy_weights() {
  if (sharded_ != nullptr) {
    // The updated chunk where the optimizer wrote it (the model's buffer, a ZeRO-3 shard, or a
    // recipe's fp32 master).
    const Buffer& held = sharded_->optimizer_params();
    const size_t elem = dtype_size(held.dtype());
    std::vector<char> bytes(elements_of(pieces_) * elem);
    const Tensor staging(bytes.data(), held.dtype(), {elements_of(pieces_)});
    if (end_ == End::last) pp_.recv(staging, peer_, kWeightsTag);
    int64_t at = 0;
    for (const OptimSegment& s : pieces_) {
      const Tensor mine = held.view(s.param_offset, {s.length});
      const Tensor staged = staging.rows(at, at + s.length);
      if (end_ == End::first) {
        be_.copy(staged, mine);
      } else {
        be_.copy(mine, staged);
      }
      at += s.length;
    }
    if (end_ == End::first) pp_.send(staging, peer_, kWeightsTag);
    return;
  }
  const Tensor table = params_.param("embed");
  const Tensor flat = table.view({table.numel()});
  if (end_ == End::first) {
    pp_.send(flat, peer_, kWeightsTag);
  } else {
    pp_.recv(flat, peer_, kWeightsTag);
  }
}

std::string TiedEmbedding::check_copy(comm::Communicator& group, int peer) {
  // What this end holds of the table between steps.
  std::vector<Tensor> held;
  if (params_.parameters().count() == 0) {  // ZeRO-3 or a recipe's store: the chunk in its shard
    for (const OptimSegment& s : pieces_) {
      held.push_back(sharded_->optimizer_params().view(s.param_offset, {s.length}));
    }
  } else {
    const Tensor table = params_.param("embed");
    held.push_back(table.view({table.numel()}));
  }
  int64_t n = 0;
  for (const Tensor& t : held) n += t.numel();
  const size_t elem = dtype_size(params_.dtype());
  std::vector<char> mine(n * elem), theirs(n * elem);
  int64_t at = 0;
  for (const Tensor& t : held) {
    be_.copy(Tensor(mine.data() + at * elem, params_.dtype(), {t.numel()}), t);
    at += t.numel();
  }
  const Tensor mine_t(mine.data(), params_.dtype(), {n}),
      theirs_t(theirs.data(), params_.dtype(), {n});
  if (end_ == End::first) {
    group.send(mine_t, peer, kWeightsTag + 1);
    return "";
  }
  group.recv(theirs_t, peer, kWeightsTag + 1);
  if (std::memcmp(mine.data(), theirs.data(), mine.size()) == 0) return "";
  int64_t first = 0;
  while (std::memcmp(mine.data() + first * elem, theirs.data() + first * elem, elem) == 0) ++first;
  return fmt::format(
      "the head's copy of the embedding differs from the first stage's table at "
      "element {} of this rank's {}",
      first, n);
}

}  // namespace trillion::parallel
