// WholeTensors: parameters kept whole on every rank, outside the data-parallel stores. Under
// ZeRO-3 these are the MoE routing biases (plan::is_routing_bias): the balancing rule moves them
// in place after each step from loads every rank knows, they get no gradient, and the optimizer
// never touches them, so sharding them would only cost a gather per update. They live in one
// buffer of their own (parameters), bound into the ParameterSet for good; the stores' ranges
// leave them out (each sits between its unit's dense tensors and its routed experts).
//
// Invariants: every picked tensor is bound to this buffer from construction on and no store binds
// it; the values equal on every rank (the same init, the same updates); checkpoints see them as
// parameters with zero optimizer moments (the one-process run's moments for a tensor without
// gradient).
#pragma once

#include <functional>
#include <vector>

#include "backend/backend.h"
#include "model/parameters.h"

namespace trillion::parallel {

class WholeTensors {
 public:
  WholeTensors(ParameterSet& params, const std::function<bool(const TensorSpec&)>& pick,
               Backend& be, MemoryTracker& tracker);
  bool empty() const { return specs_.empty(); }
  bool holds(int spec) const;
  // Table elements of unit u held here (empty when none): one contiguous run.
  UnitRange range_of_unit(int unit) const;
  void init(uint64_t seed);
  void copy_to(const Buffer& local) const;  // into a local-table-layout buffer
  void load_from(const Buffer& local);      // from one
  const Buffer& buffer() const { return buffer_; }
  // Where table tensor `spec` (one of specs()) starts in buffer().
  int64_t offset_of(int spec) const;
  const std::vector<int>& specs() const { return specs_; }

 private:
  ParameterSet& params_;
  Backend& be_;
  std::vector<int> specs_;
  std::vector<int64_t> offsets_;  // per entry of specs_
  Buffer buffer_;
};

// The parts of each local unit the two data-parallel stores of a MoE model cover: the dense
// tensors (over dp x cp) and the routed experts (stored last in a unit, over edp); the tensors
// `whole` keeps (stored just before the experts) are in neither. Units without experts have an
// empty expert part at their end.
struct UnitParts {
  std::vector<UnitRange> dense, expert;
};
UnitParts unit_parts(const ParameterSet& params, const WholeTensors* whole);

}  // namespace trillion::parallel
