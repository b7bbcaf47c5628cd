// See tensor_table.h.
#include "core/tensor_table.h"

#include <fmt/format.h>

#include "core/error.h"

namespace trillion {

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int TensorTable::add(std::string name, std::vector<int64_t> shape, bool weight_decay) {
  TRILLION_CHECK(!contains(name), "duplicate tensor name " + name);
  TRILLION_CHECK(!shape.empty() && shape.size() <= kMaxRank, "bad rank for " + name);
  TensorSpec spec{std::move(name), std::move(shape), weight_decay, total_};
  total_ += spec.numel();
  int idx = static_cast<int>(specs_.size());
  by_name_[spec.name] = idx;
  specs_.push_back(std::move(spec));
  return idx;
}

int TensorTable::index(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) throw Error(fmt::format("no tensor named '{}'", name));
  return it->second;
}

Tensor TensorTable::view(const Buffer& buffer, int index) const {
  const TensorSpec& s = spec(index);
  TRILLION_CHECK(buffer.count() >= total_, "buffer smaller than the tensor table");
  char* base = static_cast<char*>(buffer.raw()) +
               s.offset * static_cast<int64_t>(dtype_size(buffer.dtype()));
  return Tensor(base, buffer.dtype(), s.shape.data(), static_cast<int>(s.shape.size()));
}

}  // namespace trillion
