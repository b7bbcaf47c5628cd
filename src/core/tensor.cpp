// See tensor.h.
#include "core/tensor.h"

#include <fmt/format.h>

namespace trillion {

Tensor::Tensor(void* data, DType dtype, std::initializer_list<int64_t> shape)
    : Tensor(data, dtype, shape.begin(), static_cast<int>(shape.size())) {}

Tensor::Tensor(void* data, DType dtype, const int64_t* shape, int rank)
    : data_(data), dtype_(dtype), rank_(rank) {
  TRILLION_CHECK(rank >= 0 && rank <= kMaxRank, fmt::format("rank {} unsupported", rank));
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    TRILLION_CHECK(shape[d] >= 0, "negative dimension");
    shape_[d] = shape[d];
    strides_[d] = stride;
    stride *= shape[d];
  }
}

int64_t Tensor::size(int dim) const {
  TRILLION_CHECK(dim >= 0 && dim < rank_, fmt::format("dim {} of rank-{} tensor", dim, rank_));
  return shape_[dim];
}

int64_t Tensor::stride(int dim) const {
  TRILLION_CHECK(dim >= 0 && dim < rank_, fmt::format("dim {} of rank-{} tensor", dim, rank_));
  return strides_[dim];
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int d = 0; d < rank_; ++d) n *= shape_[d];
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t stride = 1;
  for (int d = rank_ - 1; d >= 0; --d) {
    if (shape_[d] != 1 && strides_[d] != stride) return false;
    stride *= shape_[d];
  }
  return true;
}

Tensor Tensor::view(std::initializer_list<int64_t> shape) const {
  TRILLION_CHECK(is_contiguous(), "view() of a non-contiguous tensor");
  Tensor t(data_, dtype_, shape);
  TRILLION_CHECK(t.numel() == numel(),
                 fmt::format("view {} of tensor {}", t.shape_string(), shape_string()));
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  TRILLION_CHECK(rank_ >= 1 && 0 <= begin && begin <= end && end <= shape_[0],
                 fmt::format("rows [{}, {}) of {}", begin, end, shape_string()));
  Tensor t = *this;
  t.data_ =
      static_cast<char*>(data_) + begin * strides_[0] * static_cast<int64_t>(dtype_size(dtype_));
  t.shape_[0] = end - begin;
  return t;
}

Tensor Tensor::columns(int64_t begin, int64_t end) const {
  TRILLION_CHECK(rank_ == 2 && 0 <= begin && begin <= end && end <= shape_[1],
                 fmt::format("columns [{}, {}) of {}", begin, end, shape_string()));
  Tensor t = *this;
  t.data_ =
      static_cast<char*>(data_) + begin * strides_[1] * static_cast<int64_t>(dtype_size(dtype_));
  t.shape_[1] = end - begin;
  return t;
}

std::string Tensor::shape_string() const {
  std::string s = "[";
  for (int d = 0; d < rank_; ++d) s += (d ? ", " : "") + std::to_string(shape_[d]);
  return s + "]";
}

}  // namespace trillion
