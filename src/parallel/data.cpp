// See data.h. Reductions are started from the hooks and completed either when a later hook finds
// them done (poll: Open MPI progresses non-blocking collectives only inside MPI calls, so every
// hook calls test() on what is in flight) or in finish_gradients().
#include "parallel/data.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/timer.h"
#include "parallel/bf16_gradients.h"
#include "parallel/mixed_weights.h"

namespace trillion::parallel {

namespace {

// Reductions in flight at once: enough to overlap with the next buckets' backward, few enough
// that ZeRO-2/3 never hold more than a few buckets of full gradients.
constexpr size_t kMaxInFlight = 2;

bool writes_gradients(Pass pass) {
  return pass == Pass::backward || pass == Pass::backward_weight;
}

}  // namespace

ModelStorage DataParallel::model_storage(int stage, bool mixed_precision, bool bf16_gradients) {
  return {.parameters = stage < 3 && !mixed_precision, .gradients = stage < 2 && !bf16_gradients};
}

DataParallel::DataParallel(ParameterSet& params, comm::Communicator& dp, Backend& backend,
                           MemoryTracker& tracker, const DataParallelOptions& options)
    : params_(params),
      dp_(dp),
      be_(backend),
      tracker_(tracker),
      options_(options),
      plan_(options.ranges.empty() ? params.unit_ranges() : options.ranges,
            options.stage == 3 ? 0 : options.bucket_elements, dp.size(), dp.rank(),
            options.tied_unit),
      finished_(params.num_units(), 0),
      reduced_(plan_.buckets().size(), 0),
      folded_(plan_.buckets().size(), 0) {
  TRILLION_CHECK(options.stage >= 0 && options.stage <= 3, "ZeRO stage must be 0..3");
  TRILLION_CHECK(options.micro_batches >= 1, "at least one micro-batch per step");
  expected_ = options.passes_per_unit.empty()
                  ? std::vector<int64_t>(params.num_units(), options.micro_batches)
                  : options.passes_per_unit;
  TRILLION_CHECK(static_cast<int>(expected_.size()) == params.num_units(),
                 "one expected pass count per unit");
  const ModelStorage need =
      model_storage(options.stage, options.mixed_precision, options.bf16_gradients);
  TRILLION_CHECK((params.parameters().count() > 0) == need.parameters &&
                     (params.gradients().count() > 0) == need.gradients,
                 "model storage does not match the ZeRO stage");
  TRILLION_CHECK(!options.mixed_precision || options.ranges.empty(),
                 "a precision recipe's store holds every unit whole");
  TRILLION_CHECK(options.shard_host == nullptr || options.shard_host->stage() == options.stage,
                 "a shard host runs the same ZeRO stage");
  ShardPlace param_place{nullptr, 0, options.shard_extra}, grad_place = param_place;
  if (options.shard_host != nullptr) {
    param_place = {&options.shard_host->optimizer_params(), options.state_base, 0};
    grad_place = {&options.shard_host->optimizer_grads(), options.state_base, 0};
  }
  params_store_ =
      options.mixed_precision
          ? make_mixed_precision_store(options.stage, params, dp, backend, tracker, plan_)
          : make_parameter_store(options.stage, params, dp, backend, tracker, plan_, param_place);
  TRILLION_CHECK(!options.bf16_gradients || options.mixed_precision,
                 "bf16 gradients need a precision recipe's store");
  grads_store_ = options.bf16_gradients
                     ? make_bf16_gradient_store(options.stage, params, dp, backend, tracker, plan_)
                     : make_gradient_store(options.stage, params, dp, backend, tracker, plan_,
                                           options.ranges.empty(), grad_place);
  for (const Bucket& b : plan_.buckets()) {
    int64_t n = expected_[b.first_unit];
    bool runs = false;
    for (int u = b.first_unit; u <= b.last_unit; ++u) {
      runs = runs || expected_[u] > 0;
      // Buckets reduced every micro-batch need every unit to see each micro-batch.
      TRILLION_CHECK(!grads_store_->reduces_every_micro_batch() || expected_[u] == n,
                     "units of a ZeRO-2/3 bucket must see the same micro-batches");
      n = std::min(n, expected_[u]);
    }
    // A bucket whose units run no backward pass (the head's copy of a tied table, whose gradient
    // goes to the first stage, in a bucket of its own under expert parallelism) has nothing to
    // reduce.
    needed_.push_back(!runs ? 0 : grads_store_->reduces_every_micro_batch() ? n : 1);
  }
  if (options.stage == 0) {
    // Every tensor of the ranges, with the optimizer state compact in table order (the whole
    // table: the one-process layout, state offset = table offset).
    int64_t state = 0;
    for (int i = 0; i < params.table().size(); ++i) {
      const TensorSpec& t = params.table().spec(i);
      if (!covers(t.offset) || t.numel() == 0) continue;
      segments_.push_back({i, t.offset, t.offset, options.state_base + state, t.numel()});
      state += t.numel();
    }
    state_elements_ = state;
  } else {
    const int64_t base = shard_base();
    for (const OwnedPiece& p : plan_.owned_pieces(params.table())) {
      segments_.push_back({p.spec, params_store_->sharded() ? base + p.local : p.global,
                           grads_store_->sharded() ? base + p.local : p.global,
                           options.state_base + p.local, p.length});
    }
  }
  params_.hooks().add(this);
}

DataParallel::~DataParallel() {
  params_.hooks().remove(this);
  for (Reduction& r : in_flight_) {
    if (r.handle) r.handle->wait();
  }
}

bool DataParallel::covers(int64_t element) const {
  for (const Bucket& b : plan_.buckets()) {
    if (element >= b.begin && element < b.end) return true;
  }
  return false;
}

void DataParallel::gather_state(const Buffer& state, const Buffer& full) {
  if (options_.stage == 0) {
    for (const OptimSegment& s : segments_) {
      be_.copy(full.view(s.param_offset, {s.length}), state.view(s.state_offset, {s.length}));
    }
    return;
  }
  if (options_.state_base == 0) {
    return gather_shards(dp_, be_, tracker_, plan_, state, full, MemoryCategory::workspace);
  }
  Buffer shard(tracker_, MemoryCategory::workspace, state.dtype(), plan_.shard_elements());
  be_.copy(shard.flat(), state.view(options_.state_base, {plan_.shard_elements()}));
  gather_shards(dp_, be_, tracker_, plan_, shard, full, MemoryCategory::workspace);
}

void DataParallel::load_state(const Buffer& full, const Buffer& state) {
  if (options_.stage == 0) {
    for (const OptimSegment& s : segments_) {
      be_.copy(state.view(s.state_offset, {s.length}), full.view(s.param_offset, {s.length}));
    }
    return;
  }
  if (options_.state_base == 0) return take_shard(be_, plan_, full, state);
  Buffer shard(tracker_, MemoryCategory::workspace, state.dtype(), plan_.shard_elements());
  take_shard(be_, plan_, full, shard);
  be_.copy(state.view(options_.state_base, {plan_.shard_elements()}), shard.flat());
}

std::vector<CheckpointPiece> DataParallel::checkpoint_pieces() const {
  std::vector<CheckpointPiece> pieces;
  if (options_.stage == 0) {
    if (dp_.rank() != 0) return pieces;
    for (const OptimSegment& s : segments_) {
      pieces.push_back({s.spec, s.param_offset, s.param_offset, s.state_offset, s.length});
    }
    return pieces;
  }
  for (const OwnedPiece& p : plan_.owned_pieces(params_.table())) {
    pieces.push_back({p.spec, p.global,
                      params_store_->sharded() ? shard_base() + p.local : p.global,
                      options_.state_base + p.local, p.length});
  }
  return pieces;
}

int64_t DataParallel::state_elements() const {
  return options_.stage == 0 ? state_elements_ : plan_.shard_elements();
}

SumAcrossRanks DataParallel::sum_across_ranks() {
  return [this](std::vector<double>& sums) {
    // Stage 0: every rank holds whole tensors, so its partial sums are already the totals.
    if (options_.stage > 0 && dp_.size() > 1 && !sums.empty()) {
      dp_.all_reduce(Tensor(sums.data(), DType::f64, {static_cast<int64_t>(sums.size())}));
    }
  };
}

void DataParallel::begin_step() {
  grads_store_->begin_step();
  std::fill(finished_.begin(), finished_.end(), 0);
  std::fill(reduced_.begin(), reduced_.end(), 0);
  std::fill(folded_.begin(), folded_.end(), 0);
  wait_seconds_ = 0;
  local_sq_ = 0;
}

void DataParallel::before(int unit, Pass pass, Use use, int next) {
  // ZeRO-3: gather what the pass reads, and start gathering what it reads next.
  if (use == Use::gradients_only) {
    params_store_->prefetch(next);
  } else {
    params_store_->acquire(unit, next);
  }
  if (writes_gradients(pass)) grads_store_->open(plan_.bucket_of_unit(unit));
  poll();
}

void DataParallel::after(int unit, Pass pass, Use use) {
  if (use != Use::gradients_only) params_store_->release(unit);
  const bool copy = options_.tied_copy && unit == options_.tied_unit;
  if ((use == Use::borrowed && !copy) || !writes_gradients(pass)) return;
  ++finished_[unit];
  maybe_reduce(plan_.bucket_of_unit(unit));
}

void DataParallel::maybe_reduce(int b) {
  const Bucket& bk = plan_.buckets()[b];
  // Micro-batches every unit of the bucket has finished; for an accumulating store, whether all
  // of them finished all of theirs.
  int64_t done = finished_[bk.first_unit];
  bool complete = true;
  for (int u = bk.first_unit; u <= bk.last_unit; ++u) {
    TRILLION_CHECK(finished_[u] <= expected_[u],
                   fmt::format("unit {} ran {} backward passes, more than the {} of a step", u,
                               finished_[u], expected_[u]));
    done = std::min(done, finished_[u]);
    complete = complete && finished_[u] == expected_[u];
  }
  if (done > folded_[b]) {
    folded_[b] = done;
    grads_store_->end_micro_batch(b);
  }
  if (grads_store_->reduces_every_micro_batch()) {
    if (done <= reduced_[b]) return;
    reduced_[b] = done;
  } else {
    if (!complete || reduced_[b] > 0) return;
    reduced_[b] = 1;
  }
  if (bk.size() > 0) start_reduction(b);  // units with nothing in this instance's ranges
}

void DataParallel::start_reduction(int b) {
  if (dp_.size() * local_estimates() > 1) local_sq_ += grads_store_->local_sum_squares(b);
  in_flight_.push_back(grads_store_->start(b));
  if (!options_.overlap) return finish_gradients();  // measuring mode: nothing hidden
  // Sharded stores: bound the gradient memory in flight by waiting for the oldest reduction
  // beyond the limit (the replicated stores reduce in the model's own buffer: nothing to bound).
  while (grads_store_->sharded() && in_flight_.size() > kMaxInFlight) {
    Timer timer;
    in_flight_.front().handle->wait();
    grads_store_->complete(in_flight_.front());
    in_flight_.erase(in_flight_.begin());
    wait_seconds_ += timer.seconds();
  }
}

void DataParallel::poll() {
  params_store_->poll();
  bool any_done = false;
  for (Reduction& r : in_flight_) {
    if (r.handle->test()) {
      grads_store_->complete(r);
      r.handle.reset();
      any_done = true;
    }
  }
  if (any_done) std::erase_if(in_flight_, [](const Reduction& r) { return !r.handle; });
}

void DataParallel::finish_gradients() {
  Timer timer;
  for (Reduction& r : in_flight_) {
    r.handle->wait();
    grads_store_->complete(r);
  }
  in_flight_.clear();
  wait_seconds_ += timer.seconds();
}

double DataParallel::gradient_sum_squares() {
  for (size_t b = 0; b < reduced_.size(); ++b) {
    TRILLION_CHECK(reduced_[b] == needed_[b],
                   fmt::format("bucket {} reduced {} of {} times before the update", b, reduced_[b],
                               needed_[b]));
  }
  double sum_sq = grads_store_->sum_squares();
  // Replicated gradients (stage 0) give every rank the total; otherwise each holds a share.
  if (options_.stage > 0 && dp_.size() > 1) dp_.all_reduce(Tensor(&sum_sq, DType::f64, {1}));
  return sum_sq;
}

std::vector<Tensor> DataParallel::reduced_gradients() {
  // The store's buffer: the model's gradients, or the bf16 ones (precision.grad_dtype = bf16);
  // under ZeRO-2/3 this rank's shards, laid out alike on ranks that hold the same units.
  const Buffer& grads = grads_store_->optimizer_grads();
  if (options_.stage >= 2) {
    if (plan_.shard_elements() == 0) return {};
    return {grads.view(shard_base(), {plan_.shard_elements()})};
  }
  std::vector<Tensor> views;
  if (options_.stage == 0) {
    if (options_.ranges.empty()) return {grads.flat()};
    for (const Bucket& b : plan_.buckets()) {
      if (b.size() > 0) views.push_back(grads.view(b.begin, {b.size()}));
    }
    return views;
  }
  for (const Bucket& b : plan_.buckets()) {
    const int64_t lo = b.owned_begin(plan_.rank()), hi = b.owned_end(plan_.rank());
    if (hi > lo) views.push_back(grads.view(lo, {hi - lo}));
  }
  return views;
}

double DataParallel::mean_across_ranks(double value) {
  if (dp_.size() == 1) return value;
  dp_.all_reduce(Tensor(&value, DType::f64, {1}));
  return value / dp_.size();
}

}  // namespace trillion::parallel
