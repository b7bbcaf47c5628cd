// Unit hooks: the protocol by which data parallelism, ZeRO (and later checkpoint snapshots)
// attach to the model without the model knowing. A unit is a contiguous range of the parameter
// table (0 the embedding, 1 + l layer l, L + 1 the head; a rank holds the units of its stages
// and numbers them 0..n-1 in table order). Every pass over a unit is bracketed:
//
//   before(u, pass)   the pass is about to read unit u's parameters (and, for the backward
//                     passes, write its gradients): they must be bound
//   after(u, pass)    the pass is done with unit u; after a backward or backward_weight pass
//                     the unit's gradients are complete for this micro-batch
//
// Passes: forward; backward (dgrad and wgrad of the unit together); backward_input (dgrad only:
// reads parameters, writes no parameter gradient); backward_weight (wgrad only). Forward visits
// a stage's units upwards, the backward passes downwards. A `borrowed` use is a unit's tensors
// used by another unit's computation (the LM head reading a tied embedding): it needs them bound
// but completes nothing. Hooks are a chain: before() calls them in order, after() in reverse.
#pragma once

#include <algorithm>
#include <vector>

namespace trillion {

enum class Pass : uint8_t { forward, backward, backward_input, backward_weight };
enum class Use : uint8_t { own, borrowed };

class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual void before(int unit, Pass pass, Use use) {}
  virtual void after(int unit, Pass pass, Use use) {}
};

class HookChain {
 public:
  void add(UnitHooks* h) { hooks_.push_back(h); }
  void remove(UnitHooks* h) { std::erase(hooks_, h); }
  bool empty() const { return hooks_.empty(); }
  void before(int unit, Pass pass, Use use = Use::own) const {
    for (UnitHooks* h : hooks_) h->before(unit, pass, use);
  }
  void after(int unit, Pass pass, Use use = Use::own) const {
    for (auto it = hooks_.rbegin(); it != hooks_.rend(); ++it) (*it)->after(unit, pass, use);
  }

 private:
  std::vector<UnitHooks*> hooks_;
};

}  // namespace trillion
