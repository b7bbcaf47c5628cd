// See tensor_table.h.
#include "core/tensor_table.h"

#include <fmt/format.h>

#include "core/error.h"

namespace trillion {

namespace {
std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s;
  for (int64_t d : shape) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return "[" + s + "]";
}

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}
}  // namespace

std::string_view shard_group_name(ShardGroup g) {
  switch (g) {
    case ShardGroup::none:
      return "none";
    case ShardGroup::tp:
      return "tp";
    case ShardGroup::ep:
      return "ep";
  }
  return "?";
}

std::string_view init_kind_name(InitKind k) {
  switch (k) {
    case InitKind::normal:
      return "normal";
    case InitKind::ones:
      return "ones";
    case InitKind::zeros:
      return "zeros";
  }
  return "?";
}

std::string_view tensor_role_name(TensorRole r) {
  switch (r) {
    case TensorRole::embedding:
      return "embedding";
    case TensorRole::norm:
      return "norm";
    case TensorRole::attention:
      return "attention";
    case TensorRole::mlp:
      return "mlp";
    case TensorRole::router:
      return "router";
    case TensorRole::shared_expert:
      return "shared_expert";
    case TensorRole::routed_expert:
      return "routed_expert";
    case TensorRole::head:
      return "head";
    case TensorRole::other:
      return "other";
  }
  return "?";
}

int64_t TensorSpec::numel() const { return product(shape); }
int64_t TensorSpec::global_numel() const { return product(global_shape); }

int ShardCoord::size(ShardGroup g) const {
  return g == ShardGroup::tp ? tp_size : g == ShardGroup::ep ? ep_size : 1;
}
int ShardCoord::rank(ShardGroup g) const {
  return g == ShardGroup::tp ? tp_rank : g == ShardGroup::ep ? ep_rank : 0;
}

int TensorTable::add(TensorSpec spec) {
  TRILLION_CHECK(!contains(spec.name), "duplicate tensor name " + spec.name);
  if (spec.global_shape.empty()) spec.global_shape = spec.shape;
  if (spec.shape.empty()) spec.shape = spec.global_shape;
  TRILLION_CHECK(!spec.shape.empty() && spec.shape.size() <= kMaxRank &&
                     spec.shape.size() == spec.global_shape.size(),
                 "bad rank for " + spec.name);
  TRILLION_CHECK(!spec.shard.sharded() ||
                     (spec.shard.dim >= 0 && spec.shard.dim < static_cast<int>(spec.shape.size())),
                 "bad shard dimension for " + spec.name);
  spec.offset = total_;
  total_ += spec.numel();
  const int idx = static_cast<int>(specs_.size());
  by_name_[spec.name] = idx;
  specs_.push_back(std::move(spec));
  return idx;
}

int TensorTable::add(std::string name, std::vector<int64_t> shape, bool weight_decay) {
  TensorSpec s;
  s.name = std::move(name);
  s.shape = shape;
  s.global_shape = std::move(shape);
  s.weight_decay = weight_decay;
  s.init = weight_decay ? TensorInit{InitKind::normal, 0.02} : TensorInit{InitKind::ones, 0};
  return add(std::move(s));
}

int TensorTable::index(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) throw Error(fmt::format("no tensor named '{}'", name));
  return it->second;
}

Tensor TensorTable::view(const Buffer& buffer, int index) const {
  const TensorSpec& s = spec(index);
  TRILLION_CHECK(buffer.count() >= total_, "buffer smaller than the tensor table");
  char* base = static_cast<char*>(buffer.raw()) +
               s.offset * static_cast<int64_t>(dtype_size(buffer.dtype()));
  return Tensor(base, buffer.dtype(), s.shape.data(), static_cast<int>(s.shape.size()));
}

TensorTable TensorTable::local(const std::function<bool(int unit)>& keep,
                               const ShardCoord& coord) const {
  TensorTable out;
  for (const TensorSpec& g : specs_) {
    if (!keep(g.unit)) continue;
    TensorSpec s = g;
    s.shape = g.global_shape;
    if (g.shard.sharded()) {
      const int n = coord.size(g.shard.group);
      int64_t& d = s.shape[g.shard.dim];
      if (d % n != 0) {
        throw Error(fmt::format("{} = {} does not divide dimension {} ({}) of tensor {} {}",
                                shard_group_name(g.shard.group), n, g.shard.dim, d, g.name,
                                shape_text(g.global_shape)));
      }
      d /= n;
    }
    if (coord.expert_width_over_tp && g.shard.width_dim >= 0) {
      int64_t& w = s.shape[g.shard.width_dim];
      if (w % coord.tp_size != 0) {
        throw Error(fmt::format("tp = {} does not divide the width ({}) of expert tensor {} {}",
                                coord.tp_size, w, g.name, shape_text(g.global_shape)));
      }
      w /= coord.tp_size;
    }
    out.add(std::move(s));
  }
  return out;
}

std::vector<int64_t> shard_origin(const TensorSpec& spec, const ShardCoord& coord) {
  std::vector<int64_t> origin(spec.shape.size(), 0);
  if (!spec.shard.sharded()) return origin;
  origin[spec.shard.dim] = coord.rank(spec.shard.group) * spec.shape[spec.shard.dim];
  if (coord.expert_width_over_tp && spec.shard.width_dim >= 0) {
    origin[spec.shard.width_dim] = coord.tp_rank * spec.shape[spec.shard.width_dim];
  }
  return origin;
}

int64_t global_element_index(const TensorSpec& spec, const ShardCoord& coord,
                             int64_t local_index) {
  if (!spec.shard.sharded()) return local_index;
  if (coord.expert_width_over_tp && spec.shard.width_dim >= 0 && coord.tp_size > 1) {
    // Two split dimensions: through the multi-index.
    const std::vector<int64_t> origin = shard_origin(spec, coord);
    const int rank = static_cast<int>(spec.shape.size());
    std::vector<int64_t> index(rank);
    for (int k = rank - 1; k >= 0; --k) {
      index[k] = local_index % spec.shape[k] + origin[k];
      local_index /= spec.shape[k];
    }
    int64_t global = 0;
    for (int k = 0; k < rank; ++k) global = global * spec.global_shape[k] + index[k];
    return global;
  }
  if (coord.size(spec.shard.group) == 1) return local_index;
  // Split the local flat index into (outer, i_dim, inner) around the shard dimension; the
  // global index offsets i_dim by this rank's share of that dimension.
  const int d = spec.shard.dim;
  int64_t inner = 1;
  for (size_t k = d + 1; k < spec.shape.size(); ++k) inner *= spec.shape[k];
  const int64_t local_dim = spec.shape[d], global_dim = spec.global_shape[d];
  const int64_t within = local_index % inner;
  const int64_t i_dim = (local_index / inner) % local_dim;
  const int64_t outer = local_index / (inner * local_dim);
  const int64_t g_dim = coord.rank(spec.shard.group) * local_dim + i_dim;
  return (outer * global_dim + g_dim) * inner + within;
}

}  // namespace trillion
