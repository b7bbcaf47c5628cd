// See parameters.h.
#include "model/parameters.h"

#include <fmt/format.h>

#include "backend/backend.h"
#include "core/error.h"
#include "core/philox.h"

namespace trillion {

ParameterSet::ParameterSet(TensorTable table, const ShardCoord& shard, DType dtype,
                           Backend& backend, MemoryTracker& tracker, ModelStorage storage)
    : table_(std::move(table)), shard_(shard), dtype_(dtype), be_(backend) {
  if (storage.parameters) {
    params_ = Buffer(tracker,
                     storage.master_weights ? MemoryCategory::optimizer : MemoryCategory::parameters,
                     dtype, table_.total_elements());
  }
  if (storage.gradients) {
    grads_ = Buffer(tracker, MemoryCategory::gradients, dtype, table_.total_elements());
  }
  // Local units in table order; each must be one contiguous run of specs.
  for (int i = 0; i < table_.size(); ++i) {
    const TensorSpec& spec = table_.spec(i);
    if (global_unit_.empty() || global_unit_.back() != spec.unit) {
      TRILLION_CHECK(local_unit(spec.unit) < 0, "units must be contiguous in the table");
      global_unit_.push_back(spec.unit);
      units_.push_back({spec.offset, spec.offset});
    }
    units_.back().end = spec.offset + spec.numel();
    unit_of_spec_.push_back(num_units() - 1);
  }
  first_spec_.assign(units_.size() + 1, table_.size());
  for (int i = table_.size() - 1; i >= 0; --i) first_spec_[unit_of_spec_[i]] = i;
  params_base_.assign(table_.size(), nullptr);
  grads_base_.assign(table_.size(), nullptr);
  const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
  for (int u = 0; u < num_units(); ++u) {
    if (storage.parameters)
      bind_parameters(u, static_cast<char*>(params_.raw()) + units_[u].begin * elem);
    if (storage.gradients)
      bind_gradients(u, static_cast<char*>(grads_.raw()) + units_[u].begin * elem);
  }
}

int ParameterSet::local_unit(int global_unit) const {
  for (size_t u = 0; u < global_unit_.size(); ++u) {
    if (global_unit_[u] == global_unit) return static_cast<int>(u);
  }
  return -1;
}

Tensor ParameterSet::view(const std::vector<char*>& base, int index) const {
  const TensorSpec& spec = table_.spec(index);
  char* b = base[index];
  TRILLION_CHECK(b != nullptr, fmt::format("{} of unit {} used while not bound ({})",
                                           &base == &params_base_ ? "parameters" : "gradients",
                                           unit_of_spec_[index], spec.name));
  return Tensor(b, dtype_, spec.shape.data(), static_cast<int>(spec.shape.size()));
}

void ParameterSet::bind(std::vector<char*>& base, int unit, const UnitRange& part, void* data) {
  TRILLION_CHECK(unit >= 0 && unit < num_units(), "unit out of range");
  const int64_t elem = static_cast<int64_t>(dtype_size(dtype_));
  for (int i = first_spec_[unit]; i < first_spec_[unit + 1]; ++i) {
    const int64_t offset = table_.spec(i).offset;
    const bool empty_at_end = table_.spec(i).numel() == 0 && offset == part.end;
    if (offset < part.begin || (offset >= part.end && !empty_at_end)) continue;
    base[i] = data == nullptr ? nullptr : static_cast<char*>(data) + (offset - part.begin) * elem;
  }
}

void ParameterSet::bind_parameters(int unit, const UnitRange& part, void* data) {
  bind(params_base_, unit, part, data);
}

void ParameterSet::bind_gradients(int unit, const UnitRange& part, void* data) {
  bind(grads_base_, unit, part, data);
}

void ParameterSet::init(uint64_t seed) {
  init(seed, [](int) { return true; });
}

void ParameterSet::init(uint64_t seed, const std::function<bool(int)>& pick) {
  std::vector<double> values;
  for (int i = 0; i < table_.size(); ++i) {
    if (!pick(i)) continue;
    const TensorSpec& spec = table_.spec(i);
    values.resize(spec.numel());
    const Philox rng(seed, "init:" + spec.name);
    for (int64_t k = 0; k < spec.numel(); ++k) {
      switch (spec.init.kind) {
        case InitKind::normal:
          values[k] = spec.init.std * rng.normal(global_element_index(spec, shard_, k));
          break;
        case InitKind::ones:
          values[k] = 1.0;
          break;
        case InitKind::zeros:
          values[k] = 0.0;
          break;
      }
    }
    Tensor dst = param(i);
    be_.copy(dst.view({dst.numel()}), Tensor(values.data(), DType::f64, {spec.numel()}));
  }
}

void ParameterSet::zero_grad() {
  if (grads_.count() > 0) be_.fill(grads_.flat(), 0.0);
}

}  // namespace trillion
