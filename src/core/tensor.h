// Tensor: a non-owning view (data pointer, dtype, shape, strides in elements) over a buffer.
// Invariants: rank <= kMaxRank; a default-constructed Tensor is empty (numel 0, data null);
// typed access checks the dtype, so a kernel never reinterprets f32 memory as f64.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.h"
#include "core/error.h"

namespace trillion {

inline constexpr int kMaxRank = 4;

class Tensor {
 public:
  Tensor() = default;
  // A contiguous (row-major) view of `shape` at `data`.
  Tensor(void* data, DType dtype, std::initializer_list<int64_t> shape);
  Tensor(void* data, DType dtype, const int64_t* shape, int rank);

  DType dtype() const { return dtype_; }
  int rank() const { return rank_; }
  int64_t size(int dim) const;
  int64_t stride(int dim) const;
  int64_t numel() const;
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;
  bool empty() const { return data_ == nullptr || numel() == 0; }

  void* raw() const { return data_; }
  template <typename T>
  T* data() const {
    TRILLION_CHECK(dtype_of<T>() == dtype_, "tensor dtype is " + std::string(dtype_name(dtype_)));
    return static_cast<T*>(data_);
  }

  // Same memory, new contiguous shape with the same element count.
  Tensor view(std::initializer_list<int64_t> shape) const;
  // Rows [begin, end) of dimension 0.
  Tensor rows(int64_t begin, int64_t end) const;
  // Columns [begin, end) of the last dimension of a 2-D view (keeps the row stride).
  Tensor columns(int64_t begin, int64_t end) const;

  std::string shape_string() const;

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::f32;
  int rank_ = 0;
  std::array<int64_t, kMaxRank> shape_{};
  std::array<int64_t, kMaxRank> strides_{};
};

}  // namespace trillion
