// See buckets.h.
#include "parallel/buckets.h"

#include <algorithm>

#include "core/error.h"

namespace trillion::parallel {

BucketPlan::BucketPlan(const std::vector<UnitRange>& units, int64_t bucket_elements, int ranks,
                       int rank, int alone_unit)
    : bucket_of_unit_(units.size(), -1), ranks_(ranks), rank_(rank) {
  TRILLION_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "bad rank for a bucket plan");
  int u = static_cast<int>(units.size()) - 1;
  while (u >= 0) {
    Bucket b;
    b.last_unit = u;
    b.end = units[u].end;
    int64_t size = 0;
    do {
      size += units[u].size();
      bucket_of_unit_[u] = static_cast<int>(buckets_.size());
      --u;
    } while (u >= 0 && bucket_elements > 0 && size < bucket_elements && u != alone_unit &&
             u + 1 != alone_unit);
    b.first_unit = u + 1;
    b.begin = units[b.first_unit].begin;
    TRILLION_CHECK(b.end - b.begin == size, "units of a bucket must be contiguous");
    b.chunk = (size + ranks - 1) / ranks;
    b.shard_offset = shard_elements_;
    shard_elements_ += b.chunk;
    buckets_.push_back(b);
  }
}

std::vector<OwnedPiece> BucketPlan::owned_pieces(const TensorTable& table) const {
  std::vector<OwnedPiece> pieces;
  for (const Bucket& b : buckets_) {
    const int64_t lo = b.owned_begin(rank_), hi = b.owned_end(rank_);
    for (int i = 0; i < static_cast<int>(table.specs().size()); ++i) {
      const TensorSpec& s = table.spec(i);
      const int64_t a = std::max(lo, s.offset), z = std::min(hi, s.offset + s.numel());
      if (a < z) pieces.push_back({i, a, b.shard_offset + (a - lo), z - a});
    }
  }
  return pieces;
}

}  // namespace trillion::parallel
