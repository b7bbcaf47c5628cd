// DiLoCo's outer optimizer (Douillard et al. 2311.08105, Algorithm 1): every H inner steps the
// islands' pseudo-gradients Delta = theta_start - theta_end are averaged, and the global
// parameters take one step of SGD with Nesterov momentum on them (the paper's best outer
// optimizer: lr 0.7, momentum 0.9), in PyTorch's formulation:
//   v     <- mu v + Delta
//   theta <- theta_start - lr (Delta + mu v)        (nesterov; plain momentum: - lr v)
// With lr = 1 and mu = 0, theta = theta_start - Delta = the islands' averaged parameters: plain
// parameter averaging, and with H = 1 synchronous data parallelism (exactly, when theta_start
// and theta_end are within a factor two of each other, by Sterbenz's lemma).
//
// The momentum lives for the whole parameter vector; Streaming DiLoCo (2501.18512) updates one
// fragment at a time, so step() takes a slice: the fragment's offset into the vector and its
// parameters and averaged pseudo-gradients.
//
// Invariants: momentum is fp32, one element per parameter (4 bytes/param of outer state, kept by
// checkpoints), owned or lent by the caller (the DiLoCo driver keeps it in an accounted Buffer);
// step() touches only the slice it is given.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace trillion {

struct OuterNesterovConfig {
  double lr = 0.7;
  double momentum = 0.9;
  bool nesterov = true;
};

class OuterNesterov {
 public:
  // `parameters` elements of momentum, zero. Error for lr <= 0 or momentum outside [0, 1).
  OuterNesterov(int64_t parameters, const OuterNesterovConfig& config);
  // Momentum in the caller's storage (which must outlive this), used as it is.
  OuterNesterov(std::span<float> momentum, const OuterNesterovConfig& config);
  OuterNesterov(const OuterNesterov&) = delete;  // the span may point into owned_
  OuterNesterov& operator=(const OuterNesterov&) = delete;
  OuterNesterov(OuterNesterov&&) = default;  // a moved vector keeps its storage
  OuterNesterov& operator=(OuterNesterov&&) = default;

  // params[i] holds theta_start for elements [offset, offset + params.size()) and receives the
  // new global parameters; delta[i] is the averaged pseudo-gradient of the same elements.
  void step(std::span<float> params, std::span<const float> delta, int64_t offset = 0);

  // The pseudo-gradient of one island: delta = start - end.
  static void pseudo_gradient(std::span<const float> start, std::span<const float> end,
                              std::span<float> delta);

  std::span<const float> momentum() const { return momentum_; }
  void set_momentum(std::span<const float> m);
  const OuterNesterovConfig& config() const { return config_; }

 private:
  OuterNesterovConfig config_;
  std::vector<float> owned_;
  std::span<float> momentum_;
};

}  // namespace trillion
