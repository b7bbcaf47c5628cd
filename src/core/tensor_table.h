// TensorTable: the named table of tensor specs that lays a model's parameters out in one flat
// buffer. Parameters, gradients and optimizer moments use the same table (same offsets) over their
// own buffers, so ZeRO sharding is slicing a range and a checkpoint is writing ranges.
//
// A TensorSpec says everything the system needs to know about a tensor, so nothing parses names
// for structure: its global shape and how it is sharded (dimension and group: tp, ep or none),
// its storage dtype, how it is initialised, which model unit it belongs to (the granularity of
// pipeline stages, data parallelism and ZeRO), its role (what the planner counts it as) and
// whether it takes weight decay. The planner's table (plan/parameter_table.h) is the global one;
// a rank's table is local(): the specs of the units its stages hold, each with the shape of this
// rank's shard.
//
// Invariants: offsets are assigned in insertion order with no padding (so tensors added back to
// back are one contiguous matrix, e.g. wq|wk|wv), names are unique, total_elements() is exactly
// the sum of the specs' element counts, and a spec's shape equals its global shape with the shard
// dimension divided by the shard group's size (and, for routed experts split over tp too, the
// width dimension by tp).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/memory.h"

namespace trillion {

// The process group a tensor is split over (none: every rank of its stage holds all of it).
enum class ShardGroup : uint8_t { none, tp, ep };
std::string_view shard_group_name(ShardGroup g);

struct TensorShard {
  int dim = -1;  // -1: not sharded
  ShardGroup group = ShardGroup::none;
  // Routed experts: their width (FE) dimension, which tp splits too where the coordinate says so
  // (ShardCoord::expert_width_over_tp: parallel.expert_tp = tp).
  int width_dim = -1;
  bool sharded() const { return group != ShardGroup::none; }
};

enum class InitKind : uint8_t { normal, ones, zeros };
std::string_view init_kind_name(InitKind k);

struct TensorInit {
  InitKind kind = InitKind::normal;
  double std = 0;  // normal only
};

// What a tensor is, for counting (planner, inspect) and for the checks that need it.
enum class TensorRole : uint8_t {
  embedding,      // the input embedding (also the head when tied)
  norm,           // RMSNorm / LayerNorm weights
  attention,      // attention projections
  mlp,            // dense MLP matrices
  router,         // MoE gate (and its bias)
  shared_expert,  // always-on experts of a MoE layer
  routed_expert,  // routed experts (sharded over ep)
  head,           // output projection (untied)
  other,
};
std::string_view tensor_role_name(TensorRole r);

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;         // as laid out in this table (this rank's shard)
  std::vector<int64_t> global_shape;  // the whole tensor
  DType dtype = DType::f32;           // storage dtype of the parameter
  TensorShard shard;
  TensorInit init;
  TensorRole role = TensorRole::other;
  int unit = 0;              // model unit: 0 embedding, 1 + l layer l, L + 1 head
  bool weight_decay = true;  // false for norms, biases and the router bias
  int64_t offset = 0;        // in elements, assigned by TensorTable::add
  int64_t numel() const;
  int64_t global_numel() const;
};

// Which shard of every sharded tensor a rank holds: its position in the tp and ep groups.
struct ShardCoord {
  int tp_size = 1, tp_rank = 0;
  int ep_size = 1, ep_rank = 0;
  bool expert_width_over_tp = false;  // routed experts' width_dim split over tp as well
  int size(ShardGroup g) const;
  int rank(ShardGroup g) const;
};

class TensorTable {
 public:
  // Appends a spec (shape defaults to global_shape when empty) and returns its index.
  int add(TensorSpec spec);
  // A replicated tensor of unit 0 (optimizer tests and small tables).
  int add(std::string name, std::vector<int64_t> shape, bool weight_decay);
  const std::vector<TensorSpec>& specs() const { return specs_; }
  const TensorSpec& spec(int index) const { return specs_.at(index); }
  int size() const { return static_cast<int>(specs_.size()); }
  // Throws Error if the name is unknown.
  int index(const std::string& name) const;
  bool contains(const std::string& name) const { return by_name_.count(name) != 0; }
  int64_t total_elements() const { return total_; }
  // The view of tensor `index` inside `buffer` (which must hold total_elements()).
  Tensor view(const Buffer& buffer, int index) const;
  Tensor view(const Buffer& buffer, const std::string& name) const {
    return view(buffer, index(name));
  }

  // A rank's table: the specs whose unit `keep` accepts, each cut to the shard `coord` holds,
  // laid out afresh. Throws Error naming the tensor when a shard group does not divide it.
  TensorTable local(const std::function<bool(int unit)>& keep, const ShardCoord& coord) const;

 private:
  std::vector<TensorSpec> specs_;
  std::unordered_map<std::string, int> by_name_;
  int64_t total_ = 0;
};

// The flat element index in the global tensor of element `local_index` of this rank's shard
// (identity for unsharded tensors). Initialisation keys its random numbers by it, so values do
// not depend on the layout.
int64_t global_element_index(const TensorSpec& spec, const ShardCoord& coord, int64_t local_index);

// The global index, along each dimension, of the first element of the block of `spec` that
// `coord` holds (all zeros for a replicated tensor); the block's extents are spec.shape.
std::vector<int64_t> shard_origin(const TensorSpec& spec, const ShardCoord& coord);

}  // namespace trillion
