// ProfilingBackend: wraps any Backend and accumulates wall time and call counts per operation,
// so `trillion bench step --profile` can say where a step's time goes (what limits MFU): FLOPs of
// the compute-bound ops (GEMMs, attention), bytes of the memory-bound ones (the least traffic
// each needs: every operand read or written once), to compare with the machine's peaks.
// It adds one clock read per call and changes no result.
#pragma once

#include <map>
#include <string>

#include "backend/backend.h"

namespace trillion {

struct OpProfile {
  double seconds = 0;
  int64_t calls = 0;
  double flops = 0;  // counted for GEMMs and attention
  double bytes = 0;  // memory traffic of the memory-bound ops: each operand read or written once
};

class ProfilingBackend final : public Backend {
 public:
  explicit ProfilingBackend(Backend& inner) : in_(inner) {}
  const std::map<std::string, OpProfile>& profile() const { return ops_; }
  void reset() { ops_.clear(); }

  const char* name() const override { return in_.name(); }
  int threads() const override { return in_.threads(); }
  AttentionTileFlops attention_tile_flops() const override { return in_.attention_tile_flops(); }
  void record_external(const char* group, double seconds, double flops, double bytes) override;
  TRILLION_BACKEND_OVERRIDES

 private:
  template <typename F>
  auto timed(const char* op, double flops, double bytes, F&& f);
  Backend& in_;
  std::map<std::string, OpProfile> ops_;
};

}  // namespace trillion
