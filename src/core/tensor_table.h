// TensorTable: the named table of tensor specs (name, shape, weight-decay flag) that lays a
// model's parameters out in one flat buffer. Parameters, gradients and optimizer moments use the
// same table (same offsets) over their own buffers, so ZeRO sharding is slicing a range and a
// checkpoint is writing ranges. Invariants: offsets are assigned in insertion order with no
// padding (so tensors added back to back are one contiguous matrix, e.g. wq|wk|wv), names are
// unique, and total_elements() is exactly the sum of the specs' element counts.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/memory.h"

namespace trillion {

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  bool weight_decay = true;  // false for norms (and biases, if a model had them)
  int64_t offset = 0;        // in elements, assigned by TensorTable::add
  int64_t numel() const;
};

class TensorTable {
 public:
  // Appends a spec and returns its index.
  int add(std::string name, std::vector<int64_t> shape, bool weight_decay);
  const std::vector<TensorSpec>& specs() const { return specs_; }
  const TensorSpec& spec(int index) const { return specs_.at(index); }
  // Throws Error if the name is unknown.
  int index(const std::string& name) const;
  bool contains(const std::string& name) const { return by_name_.count(name) != 0; }
  int64_t total_elements() const { return total_; }
  // The view of tensor `index` inside `buffer` (which must hold total_elements()).
  Tensor view(const Buffer& buffer, int index) const;
  Tensor view(const Buffer& buffer, const std::string& name) const {
    return view(buffer, index(name));
  }

 private:
  std::vector<TensorSpec> specs_;
  std::unordered_map<std::string, int> by_name_;
  int64_t total_ = 0;
};

}  // namespace trillion
