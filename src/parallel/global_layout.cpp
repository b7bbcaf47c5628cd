// See global_layout.h. A shard of a row-major tensor whose innermost split dimension is d is, for
// each index of the dimensions before d, one contiguous run of (local extent of d) x (product of
// the dimensions after d) elements, so a tensor moves as that many contiguous block copies (routed
// experts split over ep and, along their width, over tp have two split dimensions).
#include "parallel/global_layout.h"

#include "core/error.h"

namespace trillion::parallel {

namespace {

// A tensor's shard as `count` contiguous runs of `length` elements: runs along the innermost
// dimension the shard splits (`split`), one per index of the dimensions before it.
struct Blocks {
  int64_t count = 1;   // blocks per tensor
  int64_t length = 0;  // elements per block
  int split = -1;      // innermost split dimension (-1: the whole tensor is one block)
  std::vector<int64_t> origin;
};

Blocks blocks_of(const TensorSpec& s, const ShardCoord& coord) {
  Blocks b;
  b.origin = shard_origin(s, coord);
  for (int k = static_cast<int>(s.shape.size()) - 1; k >= 0 && b.split < 0; --k) {
    if (s.shape[k] != s.global_shape[k]) b.split = k;
  }
  if (b.split < 0) {
    b.length = s.numel();
    return b;
  }
  b.length = 1;
  for (size_t k = b.split; k < s.shape.size(); ++k) b.length *= s.shape[k];
  for (int k = 0; k < b.split; ++k) b.count *= s.shape[k];
  return b;
}

// The global offset (within the tensor) of block `k` of `b`.
int64_t global_offset(const TensorSpec& s, const Blocks& b, int64_t k) {
  if (b.split < 0) return 0;
  const int rank = static_cast<int>(s.shape.size());
  int64_t offset = 0, stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    int64_t i = b.origin[d];
    if (d < b.split) {
      i += k % s.shape[d];
      k /= s.shape[d];
    }
    offset += i * stride;
    stride *= s.global_shape[d];
  }
  return offset;
}

template <typename F>
void for_each_block(const TensorTable& local, const ShardCoord& coord, const TensorTable& global,
                    F&& f) {
  for (int i = 0; i < local.size(); ++i) {
    const TensorSpec& s = local.spec(i);
    const TensorSpec& g = global.spec(global.index(s.name));
    TRILLION_CHECK(g.global_shape == s.global_shape,
                   "local and global tables disagree on " + s.name);
    const Blocks b = blocks_of(s, coord);
    for (int64_t k = 0; k < b.count; ++k) {
      f(i, s.offset + k * b.length, g.offset + global_offset(s, b, k), b.length);
    }
  }
}

}  // namespace

void local_to_global(Backend& be, const TensorTable& local, const ShardCoord& coord,
                     const Buffer& local_data, const TensorTable& global, const Buffer& global_data,
                     const std::function<bool(int spec)>& contribute) {
  for_each_block(local, coord, global, [&](int spec, int64_t from, int64_t to, int64_t n) {
    if (contribute(spec)) be.copy(global_data.view(to, {n}), local_data.view(from, {n}));
  });
}

void for_each_global_run(const TensorTable& local, const ShardCoord& coord,
                         const TensorTable& global,
                         const std::function<void(int, int64_t, int64_t, int64_t)>& f) {
  for_each_block(local, coord, global, f);
}

void global_to_local(Backend& be, const TensorTable& global, const Buffer& global_data,
                     const TensorTable& local, const ShardCoord& coord, const Buffer& local_data) {
  for_each_block(local, coord, global, [&](int, int64_t to, int64_t from, int64_t n) {
    be.copy(local_data.view(to, {n}), global_data.view(from, {n}));
  });
}

}  // namespace trillion::parallel
