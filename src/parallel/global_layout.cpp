// See global_layout.h. A shard along dimension d of a row-major tensor is, for each index of the
// dimensions before d, one contiguous run of (local extent of d) x (product of the dimensions
// after d) elements, so a tensor moves as `outer` contiguous block copies.
#include "parallel/global_layout.h"

#include "core/error.h"

namespace trillion::parallel {

namespace {

struct Blocks {
  int64_t count = 1;         // blocks per tensor
  int64_t length = 0;        // elements per block
  int64_t global_first = 0;  // global offset (within the tensor) of block 0
  int64_t global_stride = 0;
};

Blocks blocks_of(const TensorSpec& s, const ShardCoord& coord) {
  Blocks b;
  if (!s.shard.sharded() || coord.size(s.shard.group) == 1) {
    b.length = s.numel();
    return b;
  }
  const int d = s.shard.dim;
  int64_t inner = 1;
  for (size_t k = d + 1; k < s.shape.size(); ++k) inner *= s.shape[k];
  for (int k = 0; k < d; ++k) b.count *= s.shape[k];
  b.length = s.shape[d] * inner;
  b.global_stride = s.global_shape[d] * inner;
  b.global_first = coord.rank(s.shard.group) * b.length;
  return b;
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
      f(i, s.offset + k * b.length, g.offset + b.global_first + k * b.global_stride, b.length);
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
