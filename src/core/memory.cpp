// See memory.h.
#include "core/memory.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>

#include "core/error.h"

namespace trillion {

namespace {

// Released blocks of at least kLargeBlock bytes are kept (kCachedBytes in all, oldest freed
// first) for the next Buffer of the same size. glibc maps every block above 32 MiB afresh (its
// mmap threshold stops growing there) and first touches of a fresh mapping fault page by page
// (~2 GB/s here): the bf16 store widens GPT-2-small's 154 MB embedding and head units four times
// a step, which cost 0.2 s of a 4.2 s step before this cache. The tracker accounts Buffers, not
// the cache: at most kCachedBytes of process memory that no Buffer holds.
constexpr size_t kLargeBlock = size_t{32} << 20;
constexpr size_t kCachedBytes = size_t{1} << 30;

struct BlockCache {
  std::mutex mutex;
  std::deque<std::pair<size_t, void*>> blocks;  // (rounded bytes, block), oldest first
  size_t bytes = 0;
};
BlockCache& block_cache() {
  static BlockCache* cache = new BlockCache;  // never destroyed: Buffers may outlive statics
  return *cache;
}

void* allocate_block(size_t rounded) {
  if (rounded >= kLargeBlock) {
    BlockCache& c = block_cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    for (auto it = c.blocks.begin(); it != c.blocks.end(); ++it) {
      if (it->first != rounded) continue;
      void* block = it->second;
      c.bytes -= rounded;
      c.blocks.erase(it);
      return block;
    }
  }
  return std::aligned_alloc(64, rounded);
}

void release_block(void* block, size_t rounded) {
  if (block == nullptr) return;
  if (rounded < kLargeBlock || rounded > kCachedBytes) return std::free(block);
  BlockCache& c = block_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  while (c.bytes + rounded > kCachedBytes) {
    std::free(c.blocks.front().second);
    c.bytes -= c.blocks.front().first;
    c.blocks.pop_front();
  }
  c.blocks.emplace_back(rounded, block);
  c.bytes += rounded;
}

size_t rounded_bytes(size_t n) {
  return (n + 63) / 64 * 64;
}

}  // namespace

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
    const size_t rounded = rounded_bytes(n);
    data_ = allocate_block(rounded);
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
  release_block(data_, rounded_bytes(bytes()));
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
