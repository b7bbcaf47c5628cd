// See tied_embedding.h.
#include "parallel/pipeline/tied_embedding.h"

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

}  // namespace

TiedEmbedding::TiedEmbedding(End end, ParameterSet& params, comm::Communicator& pp, int peer,
                             int unit, int64_t passes, Backend& backend, MemoryTracker& tracker)
    : end_(end),
      params_(params),
      pp_(pp),
      peer_(peer),
      unit_(unit),
      passes_(passes),
      be_(backend),
      staging_(tracker, MemoryCategory::workspace, params.dtype(),
               params.table().spec(params.table().index("embed")).numel()) {
  TRILLION_CHECK(passes > 0, "the tied embedding's unit runs no backward pass on this rank");
  params_.hooks().add(this);
}

TiedEmbedding::~TiedEmbedding() {
  params_.hooks().remove(this);
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
  if (sending_) {
    sending_->wait();
    sending_.reset();
  }
}

void TiedEmbedding::copy_weights() {
  const Tensor table = params_.param("embed");
  const Tensor flat = table.view({table.numel()});
  if (end_ == End::first) {
    pp_.send(flat, peer_, kWeightsTag);
  } else {
    pp_.recv(flat, peer_, kWeightsTag);
  }
}

}  // namespace trillion::parallel
