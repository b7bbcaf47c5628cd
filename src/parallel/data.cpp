// See data.h. Reductions are started from the hooks and completed either when a later hook finds
// them done (poll: Open MPI progresses non-blocking collectives only inside MPI calls, so every
// hook calls test() on what is in flight) or in finish_gradients().
#include "parallel/data.h"

#include <cmath>

#include "core/error.h"
#include "core/timer.h"

namespace trillion::parallel {

namespace {

// Reductions in flight at once: enough to overlap with the next buckets' backward, few enough
// that ZeRO-2/3 never hold more than a few buckets of full gradients.
constexpr size_t kMaxInFlight = 2;

std::vector<UnitRange> unit_ranges(const Transformer& model) {
  std::vector<UnitRange> units;
  for (int u = 0; u < model.num_units(); ++u) units.push_back(model.unit_range(u));
  return units;
}

}  // namespace

ModelStorage DataParallel::model_storage(int stage) {
  return {.parameters = stage < 3, .gradients = stage < 2};
}

DataParallel::DataParallel(Transformer& model, comm::Communicator& dp, Backend& backend,
                           MemoryTracker& tracker, const DataParallelOptions& options)
    : model_(model),
      dp_(dp),
      be_(backend),
      tracker_(tracker),
      options_(options),
      plan_(unit_ranges(model), options.stage == 3 ? 0 : options.bucket_elements, dp.size(),
            dp.rank()),
      pieces_(plan_.owned_pieces(model.table())) {
  TRILLION_CHECK(options.stage >= 0 && options.stage <= 3, "ZeRO stage must be 0..3");
  const ModelStorage need = model_storage(options.stage);
  TRILLION_CHECK((model.parameters().count() > 0) == need.parameters &&
                     (model.gradients().count() > 0) == need.gradients,
                 "model storage does not match the ZeRO stage");
  if (options.stage == 0) {
    segments_ = full_segments(model.table());
  } else {
    for (const OwnedPiece& p : pieces_) {
      segments_.push_back({p.spec, options.stage == 3 ? p.local : p.global,
                           options.stage >= 2 ? p.local : p.global, p.local, p.length});
    }
  }
  if (options.stage >= 2) grads_ = std::make_unique<GradientShards>(model, plan_, tracker);
  if (options.stage == 3) params_ = std::make_unique<ParameterShards>(model, dp, plan_, tracker);
  model_.set_hooks(this);
}

DataParallel::~DataParallel() {
  model_.set_hooks(nullptr);
  for (InFlight& f : in_flight_) {
    if (f.handle) f.handle->wait();
  }
}

void DataParallel::init_parameters(uint64_t seed) {
  if (options_.stage < 3) return model_.init_parameters(seed);
  // Initialise a full temporary copy (values keyed by tensor and element), keep this rank's shard.
  Buffer full(tracker_, MemoryCategory::workspace, model_.config().dtype,
              model_.table().total_elements());
  const size_t elem = dtype_size(full.dtype());
  for (int u = 0; u < model_.num_units(); ++u) {
    model_.bind_parameters(u, static_cast<char*>(full.raw()) + model_.unit_range(u).begin * elem);
  }
  model_.init_parameters(seed);
  for (int u = 0; u < model_.num_units(); ++u) model_.bind_parameters(u, nullptr);
  take_shard(be_, plan_, full, params_->shard());
}

void DataParallel::gather_parameters(const Buffer& full) {
  if (options_.stage < 3) return be_.copy(full.flat(), model_.parameters().flat());
  gather_shards(dp_, be_, tracker_, plan_, params_->shard(), full, MemoryCategory::workspace);
}

void DataParallel::load_parameters(const Buffer& full) {
  if (options_.stage < 3) return be_.copy(model_.parameters().flat(), full.flat());
  take_shard(be_, plan_, full, params_->shard());
}

void DataParallel::gather_state(const Buffer& state, const Buffer& full) {
  if (options_.stage == 0) return be_.copy(full.flat(), state.flat());
  gather_shards(dp_, be_, tracker_, plan_, state, full, MemoryCategory::workspace);
}

void DataParallel::load_state(const Buffer& full, const Buffer& state) {
  if (options_.stage == 0) return be_.copy(state.flat(), full.flat());
  take_shard(be_, plan_, full, state);
}

const Buffer& DataParallel::optimizer_params() {
  return options_.stage == 3 ? params_->shard() : model_.parameters();
}

const Buffer& DataParallel::optimizer_grads() {
  return options_.stage >= 2 ? grads_->shard() : model_.gradients();
}

int64_t DataParallel::state_elements() const {
  return options_.stage == 0 ? model_.table().total_elements() : plan_.shard_elements();
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
  if (options_.stage <= 1) {
    model_.zero_grad();
  } else {
    be_.fill(grads_->shard().flat(), 0.0);
  }
  last_micro_ = true;
  wait_seconds_ = 0;
}

void DataParallel::before_forward(int unit) {
  if (params_) {
    params_->gather(unit);
    params_->prefetch(unit + 1);
  }
  poll();
}

void DataParallel::after_forward(int unit) {
  if (params_) params_->release(unit);
}

void DataParallel::before_backward(int unit) {
  if (params_) {
    params_->gather(unit);
    params_->prefetch(unit - 1);
  }
  if (grads_) grads_->open(plan_.bucket_of_unit(unit));
  poll();
}

void DataParallel::after_backward(int unit) {
  if (params_) params_->release(unit);
  const int b = plan_.bucket_of_unit(unit);
  // A bucket is complete when its lowest unit's backward ends (backward runs units downwards).
  if (unit == plan_.buckets()[b].first_unit && (options_.stage >= 2 || last_micro_)) {
    start_reduction(b);
  }
}

void DataParallel::start_reduction(int b) {
  const Bucket& bk = plan_.buckets()[b];
  const DType dt = model_.config().dtype;
  const int64_t padded = bk.chunk * plan_.ranks();
  InFlight f;
  f.bucket = b;
  if (options_.stage == 0) {
    f.handle = dp_.start_all_reduce(model_.gradients().view(bk.begin, {bk.size()}));
  } else {
    Tensor input;
    if (options_.stage >= 2) {
      f.input = grads_->close(b);
      input = f.input.flat();
    } else if (padded == bk.size()) {
      input = model_.gradients().view(bk.begin, {bk.size()});
    } else {
      f.input = Buffer(tracker_, MemoryCategory::workspace, dt, padded);
      be_.copy(f.input.view(0, {bk.size()}), model_.gradients().view(bk.begin, {bk.size()}));
      input = f.input.flat();
    }
    f.output = Buffer(tracker_, MemoryCategory::gradients, dt, bk.chunk);
    f.handle = dp_.start_reduce_scatter(input, f.output.flat());
  }
  in_flight_.push_back(std::move(f));
  if (!options_.overlap) return finish_gradients();  // measuring mode: nothing hidden
  // ZeRO-2/3: bound the gradient memory in flight by waiting for the oldest reduction beyond the
  // limit (stages 0-1 reduce in the model's own gradient buffer, so nothing to bound).
  while (options_.stage >= 2 && in_flight_.size() > kMaxInFlight) {
    Timer timer;
    in_flight_.front().handle->wait();
    complete(in_flight_.front());
    in_flight_.erase(in_flight_.begin());
    wait_seconds_ += timer.seconds();
  }
}

void DataParallel::complete(InFlight& f) {
  const Bucket& bk = plan_.buckets()[f.bucket];
  if (options_.stage == 1) {
    const int64_t lo = bk.owned_begin(plan_.rank()), hi = bk.owned_end(plan_.rank());
    if (hi > lo) be_.copy(model_.gradients().view(lo, {hi - lo}), f.output.view(0, {hi - lo}));
  } else if (options_.stage >= 2) {
    grads_->accumulate(be_, f.bucket, f.output);
  }
  f.handle.reset();
  f.input = Buffer();
  f.output = Buffer();
}

void DataParallel::poll() {
  if (params_) params_->poll();
  bool any_done = false;
  for (InFlight& f : in_flight_) {
    if (f.handle->test()) {
      complete(f);
      any_done = true;
    }
  }
  if (any_done) std::erase_if(in_flight_, [](const InFlight& f) { return !f.handle; });
}

void DataParallel::finish_gradients() {
  Timer timer;
  for (InFlight& f : in_flight_) {
    f.handle->wait();
    complete(f);
  }
  in_flight_.clear();
  wait_seconds_ += timer.seconds();
}

double DataParallel::clip_gradients(double max_norm) {
  double sum_sq = 0;
  if (options_.stage == 0) {
    sum_sq = be_.sum_squares(model_.gradients().flat());  // all ranks hold the same sum
  } else {
    if (options_.stage == 1) {
      for (const OwnedPiece& p : pieces_) {
        sum_sq += be_.sum_squares(model_.gradients().view(p.global, {p.length}));
      }
    } else {
      sum_sq = be_.sum_squares(grads_->shard().flat());  // padding is zero
    }
    if (dp_.size() > 1) dp_.all_reduce(Tensor(&sum_sq, DType::f64, {1}));
  }
  const double norm = std::sqrt(sum_sq);
  if (max_norm > 0 && norm > max_norm) {
    const double f = max_norm / norm;
    if (options_.stage == 0) {
      be_.scale(model_.gradients().flat(), f);
    } else if (options_.stage == 1) {
      for (const OwnedPiece& p : pieces_)
        be_.scale(model_.gradients().view(p.global, {p.length}), f);
    } else {
      be_.scale(grads_->shard().flat(), f);
    }
  }
  return norm;
}

void DataParallel::finish_step() {
  if (options_.stage != 1 && options_.stage != 2) return;
  // Every rank updated only its owned pieces: refresh the full parameters from all shards.
  Buffer shard(tracker_, MemoryCategory::workspace, model_.config().dtype, plan_.shard_elements());
  take_shard(be_, plan_, model_.parameters(), shard);
  gather_shards(dp_, be_, tracker_, plan_, shard, model_.parameters(), MemoryCategory::workspace);
}

double DataParallel::mean_across_ranks(double value) {
  if (dp_.size() == 1) return value;
  dp_.all_reduce(Tensor(&value, DType::f64, {1}));
  return value / dp_.size();
}

}  // namespace trillion::parallel
