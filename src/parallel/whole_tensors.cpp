// See whole_tensors.h.
#include "parallel/whole_tensors.h"

#include <algorithm>

#include "core/error.h"

namespace trillion::parallel {

WholeTensors::WholeTensors(ParameterSet& params, const std::function<bool(const TensorSpec&)>& pick,
                           Backend& be, MemoryTracker& tracker)
    : params_(params), be_(be) {
  int64_t total = 0;
  for (int i = 0; i < params.table().size(); ++i) {
    if (!pick(params.table().spec(i))) continue;
    specs_.push_back(i);
    offsets_.push_back(total);
    total += params.table().spec(i).numel();
  }
  if (total == 0) return;
  buffer_ = Buffer(tracker, MemoryCategory::parameters, params.dtype(), total);
  const int64_t elem = static_cast<int64_t>(dtype_size(params.dtype()));
  for (size_t k = 0; k < specs_.size(); ++k) {
    const TensorSpec& t = params.table().spec(specs_[k]);
    params.bind_parameters(params.unit_of(specs_[k]), {t.offset, t.offset + t.numel()},
                           static_cast<char*>(buffer_.raw()) + offsets_[k] * elem);
  }
  for (int u = 0; u < params.num_units(); ++u) range_of_unit(u);  // checks contiguity
}

bool WholeTensors::holds(int spec) const {
  return std::find(specs_.begin(), specs_.end(), spec) != specs_.end();
}

UnitRange WholeTensors::range_of_unit(int unit) const {
  UnitRange r{params_.unit_range(unit).end, params_.unit_range(unit).end};
  bool any = false;
  for (int s : specs_) {
    if (params_.unit_of(s) != unit) continue;
    const TensorSpec& t = params_.table().spec(s);
    TRILLION_CHECK(!any || t.offset == r.end, "tensors kept whole must be contiguous in a unit");
    if (!any) r.begin = t.offset;
    r.end = t.offset + t.numel();
    any = true;
  }
  return r;
}

void WholeTensors::init(uint64_t seed) {
  params_.init(seed, [&](int spec) { return holds(spec); });
}

void WholeTensors::copy_to(const Buffer& local) const {
  for (size_t k = 0; k < specs_.size(); ++k) {
    const TensorSpec& t = params_.table().spec(specs_[k]);
    be_.copy(local.view(t.offset, {t.numel()}), buffer_.view(offsets_[k], {t.numel()}));
  }
}

void WholeTensors::load_from(const Buffer& local) {
  for (size_t k = 0; k < specs_.size(); ++k) {
    const TensorSpec& t = params_.table().spec(specs_[k]);
    be_.copy(buffer_.view(offsets_[k], {t.numel()}), local.view(t.offset, {t.numel()}));
  }
}

int64_t WholeTensors::offset_of(int spec) const {
  for (size_t k = 0; k < specs_.size(); ++k) {
    if (specs_[k] == spec) return offsets_[k];
  }
  TRILLION_CHECK(false, "not a tensor kept whole");
  return 0;
}

UnitParts unit_parts(const ParameterSet& params, const WholeTensors* whole) {
  UnitParts parts;
  for (int u = 0; u < params.num_units(); ++u) {
    const UnitRange r = params.unit_range(u);
    int64_t split_at = r.end;
    for (const TensorSpec& t : params.table().specs()) {
      if (t.role == TensorRole::routed_expert && t.offset >= r.begin && t.offset < r.end) {
        split_at = std::min(split_at, t.offset);
      }
    }
    const UnitRange kept = whole != nullptr ? whole->range_of_unit(u) : UnitRange{r.end, r.end};
    const bool any_kept = kept.size() > 0;
    TRILLION_CHECK(!any_kept || kept.end == split_at,
                   "the tensors kept whole sit just before the routed experts");
    parts.dense.push_back({r.begin, any_kept ? kept.begin : split_at});
    parts.expert.push_back({split_at, r.end});
  }
  return parts;
}

}  // namespace trillion::parallel
