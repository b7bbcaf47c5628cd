// Unit hooks: the protocol by which data parallelism, ZeRO (and later checkpoint snapshots)
// attach to the model without the model knowing. A unit is a contiguous range of the parameter
// table (0 the embedding, 1 + l layer l, L + 1 the head; a rank holds the units of its stages
// and numbers them 0..n-1 in table order). Every pass over a unit is bracketed:
//
//   before(u, pass, use, next)  the pass is about to use unit u: its parameters must be bound
//                     (unless use is gradients_only) and, for the backward and backward_weight
//                     passes, its gradients too. `next` is the unit this pass will read the
//                     parameters of after u (-1: none), so a store can fetch it early
//   after(u, pass, use)  the pass is done with unit u; after a backward or backward_weight pass
//                     of its own the unit's gradients are complete for this micro-batch
//
// Passes: forward; backward (dgrad and wgrad of the unit together); backward_input (dgrad only:
// reads parameters, writes no parameter gradient); backward_weight (wgrad only). Forward visits
// a stage's units upwards, the backward passes downwards. Uses: `own`; `borrowed`, a unit's
// tensors used by another unit's computation (the LM head reading a tied embedding): they must
// be bound but nothing completes; `gradients_only`, a backward_weight pass that writes the
// unit's gradients from saved activations without reading its parameters (a layer that
// recomputes nothing, the embedding). Hooks are a chain: before() calls them in order, after()
// in reverse.
#pragma once

#include <algorithm>
#include <vector>

namespace trillion {

enum class Pass : uint8_t { forward, backward, backward_input, backward_weight };
enum class Use : uint8_t { own, borrowed, gradients_only };

class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual void before(int unit, Pass pass, Use use, int next) {}
  virtual void after(int unit, Pass pass, Use use) {}
};

class HookChain {
 public:
  void add(UnitHooks* h) { hooks_.push_back(h); }
  void remove(UnitHooks* h) { std::erase(hooks_, h); }
  bool empty() const { return hooks_.empty(); }
  void before(int unit, Pass pass, Use use = Use::own, int next = -1) const {
    for (UnitHooks* h : hooks_) h->before(unit, pass, use, next);
  }
  void after(int unit, Pass pass, Use use = Use::own) const {
    for (auto it = hooks_.rbegin(); it != hooks_.rend(); ++it) (*it)->after(unit, pass, use);
  }

 private:
  std::vector<UnitHooks*> hooks_;
};

}  // namespace trillion
