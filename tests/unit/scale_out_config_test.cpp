// The scale-out keys of a run config ([parallel] allreduce and ranks_per_node, [emulate],
// [diloco], train.noise_scale_decay): defaults, the resolved TOML round trip, the mesh options
// they make (sites are blocks of dp coordinates, whatever the other degrees), and every refusal
// naming its key; and the SGD optimizer DiLoCo's parity test trains with, against hand-computed
// steps.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "optim/sgd.h"
#include "train/mesh_options.h"
#include "train/run_config.h"

namespace trillion {
namespace {

const std::string kTiny = std::string(TRILLION_SOURCE_DIR) + "/configs/tiny.toml";

RunConfig tiny(const std::vector<std::string>& sets) {
  return load_run_config(kTiny, sets);
}

TEST(ScaleOutConfig, DefaultsResolveAndRoundTrip) {
  const RunConfig d = tiny({});
  EXPECT_EQ(d.parallel.allreduce, "mpi");
  EXPECT_EQ(d.emulate.sites, 1);
  EXPECT_FALSE(d.diloco.enabled());
  EXPECT_EQ(d.train.noise_scale_decay, 0.99);
  // Mixing resolves from the overlap: replace without it, half and half with it.
  EXPECT_EQ(tiny({"diloco.islands=1"}).diloco.mixing, 0.0);
  const RunConfig s =
      tiny({"parallel.dp=4", "diloco.islands=2", "diloco.inner_steps=8", "diloco.fragments=2",
            "diloco.overlap_steps=2", "diloco.outer_precision=fp4", "emulate.sites=2",
            "emulate.latency_ms=5", "emulate.gbps=10", "parallel.allreduce=ring"});
  EXPECT_EQ(s.diloco.mixing, 0.5);
  const RunConfig back = parse_run_config(to_toml(s), "resolved", {});
  EXPECT_EQ(to_toml(back), to_toml(s));
  EXPECT_EQ(back.diloco.outer_precision, "fp4");
  EXPECT_EQ(back.emulate.gbps, 10.0);
  const StreamingConfig sc = streaming_config(back.diloco);
  EXPECT_EQ(sc.inner_steps, 8);
  EXPECT_EQ(sc.fragments, 2);
  EXPECT_EQ(sc.overlap_steps, 2);
  EXPECT_EQ(sc.pattern, FragmentPattern::strided);
}

TEST(ScaleOutConfig, MeshOptionsPlaceSitesByDataParallelCoordinate) {
  // pp 2 x dp 4 = 8 ranks, rank = pp * 4 + dp: sites are dp {0,1} and {2,3} on both stages.
  const RunConfig c = tiny({"parallel.dp=4", "parallel.pp=2", "train.grad_accum=2",
                            "emulate.sites=2", "emulate.latency_ms=5", "emulate.gbps=10",
                            "parallel.allreduce=hierarchical", "parallel.ranks_per_node=2"});
  const comm::MeshOptions o = mesh_options(c, 8);
  EXPECT_EQ(o.all_reduce, comm::AllReduceAlgorithm::hierarchical);
  EXPECT_EQ(o.ranks_per_node, 2);
  EXPECT_EQ(o.sites, 2);
  EXPECT_EQ(o.site_of_rank, (std::vector<int>{0, 0, 1, 1, 0, 0, 1, 1}));
  EXPECT_DOUBLE_EQ(o.between_sites.latency_s, 0.005);
  EXPECT_DOUBLE_EQ(o.between_sites.bytes_per_second, 1.25e9);
  EXPECT_EQ(describe_mesh_options(o),
            "allreduce hierarchical (2 ranks per node); emulated links between 2 sites: 5 ms one "
            "way, 10 Gb/s");
  // No emulation: no sites; gbps 0: latency only.
  EXPECT_TRUE(mesh_options(tiny({}), 1).site_of_rank.empty());
  const comm::MeshOptions lat =
      mesh_options(tiny({"parallel.dp=2", "emulate.sites=2", "emulate.latency_ms=1"}), 2);
  EXPECT_FALSE(std::isfinite(lat.between_sites.bytes_per_second));
}

TEST(ScaleOutConfig, RefusalsNameTheKeyAndTheFix) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"parallel.allreduce=tree"}, "parallel.allreduce"},
      {{"parallel.ranks_per_node=-1"}, "parallel.ranks_per_node = -1 must be >= 0"},
      {{"parallel.dp=2", "emulate.sites=4"}, "emulate.sites = 4 does not divide parallel.dp = 2"},
      {{"emulate.latency_ms=-1"}, "emulate.latency_ms = -1"},
      {{"emulate.link=3"}, "unknown key 'emulate.link'"},
      {{"parallel.dp=2", "diloco.islands=4"}, "diloco.islands = 4 does not divide parallel.dp"},
      {{"diloco.islands=1", "model.dtype=f64"}, "diloco needs model.dtype = \"f32\""},
      {{"diloco.islands=1", "parallel.schedule=dualpipe"}, "dualpipe\" is not supported"},
      {{"diloco.islands=1", "diloco.inner_steps=0"}, "diloco.inner_steps = 0 must be >= 1"},
      {{"diloco.islands=1", "diloco.inner_steps=6", "diloco.fragments=4"},
       "diloco.fragments = 4 must be >= 1 and divide diloco.inner_steps = 6"},
      {{"diloco.islands=1", "diloco.inner_steps=4", "diloco.fragments=4"},
       "diloco.fragments = 4 exceeds the model's 2 layers"},
      {{"diloco.islands=1", "diloco.inner_steps=8", "diloco.fragments=2", "diloco.overlap_steps=5"},
       "diloco.overlap_steps = 5 must be between 0 and inner_steps/fragments = 4"},
      {{"diloco.islands=1", "diloco.outer_lr=0"}, "diloco.outer_lr = 0 must be > 0"},
      {{"diloco.islands=1", "diloco.outer_momentum=1"}, "diloco.outer_momentum = 1 must be in"},
      {{"diloco.islands=1", "diloco.outer_precision=int8"}, "diloco.outer_precision"},
      {{"diloco.islands=1", "diloco.fragment_pattern=random"}, "diloco.fragment_pattern"},
      {{"diloco.islands=1", "diloco.mixing=2"}, "diloco.mixing = 2 must be in [0, 1]"},
      {{"train.noise_scale_decay=1"}, "train.noise_scale_decay = 1 must be in [0, 1)"},
      {{"diloco.islandz=2"}, "unknown key 'diloco.islandz'"},
  };
  for (const auto& [sets, expect] : cases) {
    try {
      tiny(sets);
      ADD_FAILURE() << sets.back() << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos)
          << sets.back() << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("tiny.toml"), std::string::npos) << e.what();
    }
  }
}

TEST(Sgd, MomentumAndDecoupledDecayAreTheHandComputedSequence) {
  TensorTable table;
  table.add("w", {2}, true);
  table.add("norm", {1}, false);  // no weight decay
  MemoryTracker tracker;
  Buffer p(tracker, MemoryCategory::parameters, DType::f64, 3);
  Buffer g(tracker, MemoryCategory::gradients, DType::f64, 3);
  auto* w = static_cast<double*>(p.raw());
  auto* gr = static_cast<double*>(g.raw());
  w[0] = 1.0, w[1] = -2.0, w[2] = 0.5;
  gr[0] = 0.1, gr[1] = 0.2, gr[2] = -0.3;
  Sgd opt(table, full_segments(table), 3, DType::f64, {.momentum = 0.5, .weight_decay = 0.1},
          tracker);
  EXPECT_EQ(tracker.current(MemoryCategory::optimizer), 3 * 8u);  // the momentum only
  EXPECT_EQ(opt.second_moment().count(), 0);
  // m1 = g, w1 = w0 - lr (g + wd w0); m2 = 1.5 g, w2 = w1 - lr (1.5 g + wd w1).
  const double lr = 0.2;
  double expect[3];
  for (int i = 0; i < 3; ++i) {
    const double wd = i < 2 ? 0.1 : 0.0;
    const double w1 = w[i] - lr * (gr[i] + wd * w[i]);
    expect[i] = w1 - lr * (1.5 * gr[i] + wd * w1);
  }
  opt.step(p, g, lr);
  opt.step(p, g, lr);
  EXPECT_EQ(opt.steps_taken(), 2);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(w[i], expect[i], 1e-15) << i;
    EXPECT_NEAR(static_cast<double*>(opt.first_moment().raw())[i], 1.5 * gr[i], 1e-15) << i;
  }
  // Without momentum no state at all, and the step is w - lr (g + wd w).
  Sgd plain(table, full_segments(table), 3, DType::f64, {.momentum = 0.0}, tracker);
  EXPECT_EQ(plain.first_moment().count(), 0);
  const double before = w[0];
  plain.step(p, g, lr);
  EXPECT_NEAR(w[0], before - lr * gr[0], 1e-15);
  EXPECT_THROW(Sgd(table, full_segments(table), 3, DType::bf16, {}, tracker), Error);
  EXPECT_THROW(Sgd(table, full_segments(table), 3, DType::f64, {.momentum = 1.0}, tracker), Error);
}

}  // namespace
}  // namespace trillion
