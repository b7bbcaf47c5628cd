// Streaming DiLoCo's fragment schedule (Douillard et al. 2501.18512 §2): the model's layers are
// split into F fragments, and each fragment runs its own DiLoCo round of H inner steps, the
// fragments staggered evenly so that at most one exchange starts every H/F steps and the peak
// bandwidth falls by F. Fragments are strided by default (layer l belongs to fragment l mod F, the
// paper's better choice: each fragment spans the depth), or sequential (contiguous blocks).
//
// Timing (steps counted from 1; "after step t" = once inner step t is done):
//   fragment p sends its pseudo-gradient after steps t = (p + 1) H/F + k H, k = 0, 1, ...
//   (so with F = 1 every H steps, DiLoCo's schedule; fragment p's first round is (p+1) H/F
//   steps, and every later round H);
//   its exchange overlaps tau inner steps and lands after step t + tau, when the fragment's new
//   global parameters are merged into the local ones: theta = a theta_local + (1 - a) theta_global
//   (the paper's mixing factor a; a = 0 replaces, and tau = 0 is plain, blocking DiLoCo).
//
// Invariants: F divides H and 0 <= tau <= H/F (an exchange lands before the same fragment's next
// one starts, and at most one exchange per fragment is in flight); every fragment sends exactly
// once in every window of H consecutive steps after its first round.
#pragma once

#include <cstdint>
#include <vector>

namespace trillion {

enum class FragmentPattern { strided, sequential };

struct StreamingConfig {
  int inner_steps = 100;  // H
  int fragments = 1;      // F
  int overlap_steps = 0;  // tau
  double mixing = 0.5;    // a
  FragmentPattern pattern = FragmentPattern::strided;
};

class FragmentSchedule {
 public:
  // Error naming diloco.* keys when the config breaks the invariants or n_layers < fragments.
  FragmentSchedule(const StreamingConfig& config, int n_layers);

  const StreamingConfig& config() const { return config_; }
  int fragment_of_layer(int layer) const;
  std::vector<int> layers_of(int fragment) const;
  // Fragments whose exchange starts after step `step`, and those whose exchange lands (is merged)
  // after it.
  std::vector<int> sends_after(int64_t step) const;
  std::vector<int> merges_after(int64_t step) const;
  // The step after which fragment p's k-th exchange (k = 0, 1, ...) starts.
  int64_t send_step(int fragment, int64_t k) const;

 private:
  StreamingConfig config_;
  int n_layers_;
};

// theta_local <- a theta_local + (1 - a) theta_global, element by element.
void merge_fragment(float* local, const float* global, int64_t n, double mixing);

}  // namespace trillion
