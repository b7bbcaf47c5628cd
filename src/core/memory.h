// Owned memory and its accounting. Every byte the engine allocates for a run lives in a Buffer
// tagged with a MemoryCategory and reported to a MemoryTracker, which keeps current and peak
// bytes per category. Invariant: tracker.current(c) == sum of live Buffers of category c, so
// the reported numbers are exact, not estimates (the planner's formulas are tested against them).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/dtype.h"
#include "core/tensor.h"

namespace trillion {

enum class MemoryCategory : uint8_t { parameters, gradients, optimizer, activations, workspace };
inline constexpr int kMemoryCategories = 5;
std::string_view memory_category_name(MemoryCategory c);

class MemoryTracker {
 public:
  void allocate(MemoryCategory c, size_t bytes);
  void release(MemoryCategory c, size_t bytes);
  size_t current(MemoryCategory c) const { return current_[static_cast<int>(c)]; }
  size_t peak(MemoryCategory c) const { return peak_[static_cast<int>(c)]; }
  size_t current_total() const;
  size_t peak_total() const { return peak_total_; }
  // Starts a new peak window (e.g. per step): peaks become the current values.
  void reset_peaks();
  // A second peak over a window (one checkpoint write), leaving the peaks above alone.
  void start_window() { window_peak_total_ = current_total(); }
  size_t window_peak_total() const { return window_peak_total_; }

 private:
  std::array<size_t, kMemoryCategories> current_{};
  std::array<size_t, kMemoryCategories> peak_{};
  size_t peak_total_ = 0;
  size_t window_peak_total_ = 0;
};

// A zero-initialised, 64-byte aligned allocation of `count` elements of `dtype`, accounted to
// `tracker` under `category` for its lifetime. Move-only.
class Buffer {
 public:
  Buffer() = default;
  Buffer(MemoryTracker& tracker, MemoryCategory category, DType dtype, int64_t count);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  DType dtype() const { return dtype_; }
  int64_t count() const { return count_; }
  size_t bytes() const { return static_cast<size_t>(count_) * dtype_size(dtype_); }
  void* raw() const { return data_; }
  // A contiguous view of `shape` starting `offset` elements into the buffer.
  Tensor view(int64_t offset, std::initializer_list<int64_t> shape) const;
  Tensor flat() const { return view(0, {count_}); }

 private:
  void reset();
  MemoryTracker* tracker_ = nullptr;
  MemoryCategory category_ = MemoryCategory::workspace;
  DType dtype_ = DType::f32;
  int64_t count_ = 0;
  void* data_ = nullptr;
};

}  // namespace trillion
