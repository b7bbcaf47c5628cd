// Carver: cuts consecutive tensors out of one flat Buffer. Run once without a buffer to count the
// elements needed, then again over the allocated buffer to take the same views: the two passes
// cannot disagree because they are the same code.
#pragma once

#include <initializer_list>

#include "core/memory.h"

namespace trillion {

class Carver {
 public:
  Carver() = default;  // counting pass
  explicit Carver(const Buffer& buffer) : buffer_(&buffer) {}
  Tensor take(std::initializer_list<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    Tensor t = buffer_ ? buffer_->view(offset_, shape) : Tensor();
    offset_ += n;
    return t;
  }
  int64_t used() const { return offset_; }

 private:
  const Buffer* buffer_ = nullptr;
  int64_t offset_ = 0;
};

}  // namespace trillion
