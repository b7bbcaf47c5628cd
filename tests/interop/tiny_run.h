// A tiny checkpoint for the interop tests (shared by interop_test.cpp and generate_test.cpp).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "../train/cli_util.h"
#include "backend/backend.h"
#include "core/memory.h"
#include "model/transformer.h"
#include "train/checkpoint/checkpoint.h"
#include "train/run_config.h"

namespace trillion::testing {

// A tiny trained-looking checkpoint (random init of configs/tiny.toml, or of `config`, seed 7) in
// `run_dir`; `adjust` (when given) changes the initialised parameters before they are written.
struct TinyRun {
  RunConfig cfg;
  std::string dir;  // the checkpoint directory
};
inline TinyRun make_tiny_run(const std::string& run_dir,
                             const std::vector<std::string>& overrides = {},
                             const std::string& config = "tiny.toml",
                             const std::function<void(Transformer&)>& adjust = {}) {
  TinyRun r;
  r.cfg = load_run_config(testing::config_path(config), overrides);
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  Transformer model(r.cfg.model, {1, r.cfg.model.seq_len}, *be, tracker);
  model.init_parameters(7);
  if (adjust) adjust(model);
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

// Logits [n, V] (row-major) of every position of `ids` from trillion's full forward.
inline std::vector<double> full_logits(const RunConfig& cfg, const std::string& ckpt,
                                       const std::vector<int32_t>& ids) {
  MemoryTracker tracker;
  auto be = make_cpu_backend(tracker);
  const int64_t n = static_cast<int64_t>(ids.size()), V = cfg.model.vocab_size;
  Transformer model(cfg.model, {1, n}, *be, tracker);
  load_checkpoint(ckpt, model.parameters(), nullptr, nullptr);
  std::vector<int32_t> targets(n, 0);
  model.forward(ids.data(), targets.data());
  std::vector<double> logits(n * V);
  Buffer rows(tracker, MemoryCategory::workspace, cfg.model.dtype, n * V);
  be->gemm(rows.view(0, {n, V}), false, true, model.final_hidden().rows(0, n), model.head_weight(),
           1.0, 0.0);
  be->copy(Tensor(logits.data(), DType::f64, {n * V}), rows.flat());
  return logits;
}

}  // namespace trillion::testing
