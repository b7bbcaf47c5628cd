// BucketPlan: how data parallelism and ZeRO cut the flat parameter/gradient layout. Buckets are
// runs of whole model units (model/parameters.h), formed in backward order (the head first) so a
// bucket's gradients are complete as soon as its lowest unit's backward ends and its reduction
// can start while the layers below still run. Each bucket is padded to a multiple of the dp size
// n and cut into n equal chunks; rank r owns chunk r of every bucket. This rank's shard (optimizer
// state under ZeRO >= 1, gradients under ZeRO >= 2, parameters under ZeRO 3) is the concatenation
// of its chunks in bucket order.
//
// Invariants: buckets cover the table exactly once; shard_elements() = sum of chunks, which is
// exactly P / n when every bucket's size is divisible by n (the padding is zeros that no optimizer
// segment touches); owned pieces never cross a tensor boundary.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor_table.h"
#include "model/parameters.h"

namespace trillion::parallel {

struct Bucket {
  int first_unit = 0, last_unit = 0;  // units first..last (ascending) it holds
  int64_t begin = 0, end = 0;         // elements of the flat table
  int64_t chunk = 0;                  // elements per rank: ceil(size / n)
  int64_t shard_offset = 0;           // where this rank's chunk starts in the shard
  int64_t size() const { return end - begin; }
  int64_t owned_begin(int rank) const { return std::min(end, begin + rank * chunk); }
  int64_t owned_end(int rank) const { return std::min(end, begin + (rank + 1) * chunk); }
};

// A piece of one table tensor that this rank owns: global (table) and shard-local offsets.
struct OwnedPiece {
  int spec = 0;
  int64_t global = 0, local = 0, length = 0;
};

class BucketPlan {
 public:
  // bucket_elements <= 0: one unit per bucket (ZeRO-3 gathers and frees per layer). alone_unit
  // (>= 0) gets a bucket of its own whatever bucket_elements says: a tied embedding's table and
  // the head's copy of it are then cut into the same chunks on both pipeline ends.
  BucketPlan(const std::vector<UnitRange>& units, int64_t bucket_elements, int ranks, int rank,
             int alone_unit = -1);
  const std::vector<Bucket>& buckets() const { return buckets_; }
  int bucket_of_unit(int unit) const { return bucket_of_unit_.at(unit); }
  int64_t shard_elements() const { return shard_elements_; }
  int ranks() const { return ranks_; }
  int rank() const { return rank_; }
  // This rank's pieces of every tensor of `table`, in bucket then table order.
  std::vector<OwnedPiece> owned_pieces(const TensorTable& table) const;

 private:
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_unit_;
  int64_t shard_elements_ = 0;
  int ranks_, rank_;
};

}  // namespace trillion::parallel
