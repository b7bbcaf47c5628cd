// A tiny checkpoint for the interop tests (shared by interop_test.cpp and generate_test.cpp).
#pragma once

#include <string>
#include <vector>

#include "../train/cli_util.h"
#include "backend/backend.h"
#include "core/memory.h"
#include "model/transformer.h"
#include "train/checkpoint/checkpoint.h"
#include "train/run_config.h"

namespace trillion::testing {

// A tiny trained-looking checkpoint (random init of configs/tiny.toml, seed 7) in `run_dir`.
struct TinyRun {
  RunConfig cfg;
  std::string dir;  // the checkpoint directory
};
inline TinyRun make_tiny_run(const std::string& run_dir, const std::vector<std::string>& overrides = {}) {
  TinyRun r;
  r.cfg = load_run_config(testing::config_path("tiny.toml"), overrides);
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  Transformer model(r.cfg.model, {1, r.cfg.model.seq_len}, *be, tracker);
  model.init_parameters(7);
  Buffer m1(tracker, MemoryCategory::optimizer, r.cfg.model.dtype, model.parameters().count());
  Buffer m2(tracker, MemoryCategory::optimizer, r.cfg.model.dtype, model.parameters().count());
  CheckpointContents c;
  c.params = &model.parameters();
  c.first_moment = &m1;
  c.second_moment = &m2;
  c.state.step = 3;
  c.config_toml = to_toml(r.cfg);
  r.dir = write_checkpoint(run_dir, c, 2);
  return r;
}

}  // namespace trillion::testing
