// ParameterSet: this rank's parameters and gradients — the local parameter table (the units of
// the rank's stages, each tensor cut to the rank's shard), the flat buffers that hold them (unless
// a ZeRO store keeps them elsewhere), where each unit currently lives, the hook chain, and the
// layout-independent initialisation. Every StageModel of the rank takes its tensor views from
// here, so data parallelism and ZeRO see one flat layout per rank whatever the stages.
//
// Invariants: local units are numbered 0..n-1 in table order and each is one contiguous range of
// the table; tensors are bound per unit or per part of a unit; a view of an unbound tensor is an
// internal error, not a wild read; init values depend
// only on (seed, tensor name, global element index), never on the layout.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/tensor_table.h"
#include "model/unit_hooks.h"

namespace trillion {

class Backend;

struct UnitRange {
  int64_t begin = 0, end = 0;  // elements of the flat parameter table
  int64_t size() const { return end - begin; }
};

// Which flat buffers the model allocates itself. ZeRO-2 keeps gradients, ZeRO-3 parameters and
// gradients elsewhere and binds each unit's memory (bind_parameters/bind_gradients) before the
// model touches it.
struct ModelStorage {
  bool parameters = true;
  bool gradients = true;
  // The parameters are the fp32 master copy of a precision recipe (model/linear_gemm.h), counted
  // as optimizer state (plan/'s 4 master bytes); the bf16 compute copy is the `parameters`.
  bool master_weights = false;
};

class ParameterSet {
 public:
  // table: this rank's table (TensorTable::local of the global one), in `dtype`.
  ParameterSet(TensorTable table, const ShardCoord& shard, DType dtype, Backend& backend,
               MemoryTracker& tracker, ModelStorage storage = {});

  const TensorTable& table() const { return table_; }
  DType dtype() const { return dtype_; }
  const ShardCoord& shard() const { return shard_; }
  int num_units() const { return static_cast<int>(units_.size()); }
  const UnitRange& unit_range(int unit) const { return units_.at(unit); }
  const std::vector<UnitRange>& unit_ranges() const { return units_; }
  int global_unit(int unit) const { return global_unit_.at(unit); }
  // The local unit of a global unit id; -1 when this rank does not hold it.
  int local_unit(int global_unit) const;
  int unit_of(int spec) const { return unit_of_spec_.at(spec); }

  // Views of table entry `spec` (or a run of entries stored back to back, joined into one
  // [rows, cols] matrix) in the current binding of its unit.
  Tensor param(int spec) const { return view(params_base_, spec); }
  Tensor grad(int spec) const { return view(grads_base_, spec); }
  Tensor param(const std::string& name) const { return param(table_.index(name)); }
  Tensor grad(const std::string& name) const { return grad(table_.index(name)); }

  // Unit `unit`'s parameters (gradients) now live at `data`: the unit's first element at the
  // pointer. nullptr unbinds.
  void bind_parameters(int unit, void* data) { bind_parameters(unit, unit_range(unit), data); }
  void bind_gradients(int unit, void* data) { bind_gradients(unit, unit_range(unit), data); }
  // The same for the tensors of `unit` that start inside `part` (part.begin's element at the
  // pointer): a unit split between two stores (expert parallelism's dense and expert parts, the
  // routing bias ZeRO-3 keeps whole) is bound part by part.
  void bind_parameters(int unit, const UnitRange& part, void* data);
  void bind_gradients(int unit, const UnitRange& part, void* data);
  // The model's own flat buffers (empty when ModelStorage says they live elsewhere).
  Buffer& parameters() { return params_; }
  Buffer& gradients() { return grads_; }

  // Fills every bound parameter: normal(0, std) from Philox keyed by (seed, "init:" + name,
  // global element index), ones or zeros, as each spec's init says.
  void init(uint64_t seed);
  // The same for the tensors `pick(spec)` selects only (the others may be unbound).
  void init(uint64_t seed, const std::function<bool(int)>& pick);
  void zero_grad();  // the model's own gradient buffer (nothing when gradients live elsewhere)

  HookChain& hooks() { return hooks_; }

 private:
  Tensor view(const std::vector<char*>& base, int spec) const;
  void bind(std::vector<char*>& base, int unit, const UnitRange& part, void* data);

  TensorTable table_;
  ShardCoord shard_;
  DType dtype_;
  Backend& be_;
  Buffer params_, grads_;
  std::vector<UnitRange> units_;
  std::vector<int> global_unit_, unit_of_spec_;
  std::vector<int> first_spec_;                  // per unit, and one past the last unit
  std::vector<char*> params_base_, grads_base_;  // per spec: where its first element lives
  HookChain hooks_;
};

}  // namespace trillion
