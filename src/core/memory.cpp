// See memory.h.
#include "core/memory.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.h"

namespace trillion {

std::string_view memory_category_name(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::parameters:
      return "parameters";
    case MemoryCategory::gradients:
      return "gradients";
    case MemoryCategory::optimizer:
      return "optimizer";
    case MemoryCategory::activations:
      return "activations";
    case MemoryCategory::workspace:
      return "workspace";
  }
  return "?";
}

void MemoryTracker::allocate(MemoryCategory c, size_t bytes) {
  size_t& cur = current_[static_cast<int>(c)];
  cur += bytes;
  size_t& pk = peak_[static_cast<int>(c)];
  if (cur > pk) pk = cur;
  size_t total = current_total();
  if (total > peak_total_) peak_total_ = total;
  if (total > window_peak_total_) window_peak_total_ = total;
}

void MemoryTracker::release(MemoryCategory c, size_t bytes) {
  size_t& cur = current_[static_cast<int>(c)];
  TRILLION_CHECK(cur >= bytes, "memory released twice");
  cur -= bytes;
}

size_t MemoryTracker::current_total() const {
  size_t total = 0;
  for (size_t b : current_) total += b;
  return total;
}

void MemoryTracker::reset_peaks() {
  peak_ = current_;
  peak_total_ = current_total();
}

Buffer::Buffer(MemoryTracker& tracker, MemoryCategory category, DType dtype, int64_t count)
    : tracker_(&tracker), category_(category), dtype_(dtype), count_(count) {
  TRILLION_CHECK(count >= 0, "negative buffer size");
  size_t n = bytes();
  if (n > 0) {
    size_t rounded = (n + 63) / 64 * 64;
    data_ = std::aligned_alloc(64, rounded);
    if (data_ == nullptr) {
      throw Error(fmt::format("out of memory allocating {} bytes of {}", n,
                              memory_category_name(category)));
    }
    std::memset(data_, 0, rounded);
  }
  tracker_->allocate(category_, n);
}

Buffer::~Buffer() {
  reset();
}

void Buffer::reset() {
  if (tracker_ != nullptr) tracker_->release(category_, bytes());
  std::free(data_);
  tracker_ = nullptr;
  data_ = nullptr;
  count_ = 0;
}

Buffer::Buffer(Buffer&& other) noexcept {
  *this = std::move(other);
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    reset();
    tracker_ = other.tracker_;
    category_ = other.category_;
    dtype_ = other.dtype_;
    count_ = other.count_;
    data_ = other.data_;
    other.tracker_ = nullptr;
    other.data_ = nullptr;
    other.count_ = 0;
  }
  return *this;
}

Tensor Buffer::view(int64_t offset, std::initializer_list<int64_t> shape) const {
  Tensor t(static_cast<char*>(data_) + offset * static_cast<int64_t>(dtype_size(dtype_)), dtype_,
           shape);
  TRILLION_CHECK(offset >= 0 && offset + t.numel() <= count_,
                 fmt::format("view {} at offset {} exceeds buffer of {} elements", t.shape_string(),
                             offset, count_));
  return t;
}

}  // namespace trillion
