// The inputs and outputs of one attention benchmark, shared by `bench attention` (one process)
// and `bench attention --cp N` (ring attention, bench_context.h): qkv and dqkv [B*T, QKV], out
// and dout [B*T, NH*HD], f32, counted as activations in the tracker. qkv holds standard normals
// from Philox(seed, purpose), element i from draw i; dout holds the first B*T*NH*HD of the same
// draws (so a run is reproducible and each rank of a ring can draw its own).
#pragma once

#include <cstdint>
#include <string_view>

#include "backend/backend.h"
#include "core/memory.h"

namespace trillion::cli {

class AttentionBenchBuffers {
 public:
  AttentionBenchBuffers(Backend& backend, MemoryTracker& tracker, const AttentionShape& shape,
                        uint64_t seed, std::string_view purpose);

  // 2-D views of the buffers.
  Tensor qkv() const { return qkv_.view(0, {rows_, width_}); }
  Tensor dqkv() const { return dqkv_.view(0, {rows_, width_}); }
  Tensor out() const { return out_.view(0, {rows_, heads_width_}); }
  Tensor dout() const { return dout_.view(0, {rows_, heads_width_}); }

 private:
  int64_t rows_, width_, heads_width_;
  Buffer qkv_, out_, dout_, dqkv_;
};

}  // namespace trillion::cli
