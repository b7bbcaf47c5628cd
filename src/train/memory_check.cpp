// See memory_check.h.
#include "train/memory_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "plan/activation_memory.h"
#include "plan/context_ring.h"
#include "plan/layout.h"
#include "plan/memory.h"
#include "plan/model_spec.h"
#include "plan/units.h"
#include "precision/recipe.h"
#include "schedule/action.h"

namespace trillion {

namespace {

// The first number of a one-line file such as /sys/fs/cgroup/memory.max ("max": no limit).
double read_number(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word == "max") return 0;
  char* end = nullptr;
  const double v = std::strtod(word.c_str(), &end);
  return end != word.c_str() && v > 0 ? v : 0;
}

double meminfo_available() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) {
      std::istringstream fields(line.substr(13));
      double kib = 0;
      if (fields >> kib) return kib * 1024;
    }
  }
  return 0;
}

// The moments the optimizer keeps (optim/: AdamW and LAMB two, SGD its momentum or none).
int moment_count(const RunConfig& c) {
  if (c.optim.name == "sgd") return c.optim.beta1 > 0 ? 1 : 0;
  return 2;
}

// Bytes per parameter of each model state as StepRunner stores them for the precision recipe,
// split into what ZeRO shards (zero_model_states' three terms) and an fp32 master kept whole in
// the model's buffer. recipe_weights_in_store is the one place that says where the master lives.
struct StateBytes {
  double weights = 0, gradients = 0, optimizer = 0, whole_master = 0;
};
StateBytes state_bytes(const RunConfig& c) {
  const double e = static_cast<double>(dtype_size(c.model.dtype));
  const double moments = moment_count(c) * e;
  if (c.precision.recipe == "fp32") return {e, e, moments, 0};
  const double copy = precision::recipe_named(c.precision.recipe).weight_bytes;  // bf16
  if (recipe_weights_in_store(c)) {  // parallel/mixed_weights.h: the master beside the moments
    return {copy, c.precision.grad_dtype == "bf16" ? 2.0 : 4.0, 4 + moments, 0};
  }
  return {copy, 4, moments, 4};  // model/linear_gemm.h: the copy of the whole fp32 model buffer
}

plan::Layout layout_of(const RunConfig& c) {
  const ParallelConfig& pc = c.parallel;
  plan::Layout l;
  l.tp = static_cast<int>(pc.tp), l.pp = static_cast<int>(pc.pp), l.cp = static_cast<int>(pc.cp);
  l.ep = static_cast<int>(pc.ep), l.dp = static_cast<int>(pc.dp);
  l.sp = pc.sp;
  l.zero = static_cast<int>(pc.zero);
  l.schedule = schedule::parse_schedule_kind(pc.schedule);
  l.chunks = pc.pp == 1                                           ? 1
             : l.schedule == schedule::ScheduleKind::kDualPipe    ? 2
             : l.schedule == schedule::ScheduleKind::kInterleaved ? static_cast<int>(pc.chunks)
                                                                  : 1;
  l.stage_layers = pc.stage_layers();
  if (!l.stage_layers.empty()) l.partition = plan::Partition::kExplicit;
  return l;
}

}  // namespace

std::string MemoryPlan::describe() const {
  using plan::format_bytes;
  return fmt::format(
      "{} (data {}, weights {}, gradients {}, optimizer {}, activations {} of one micro-batch{}, "
      "checkpoint {})",
      format_bytes(total()), format_bytes(data), format_bytes(weights), format_bytes(gradients),
      format_bytes(optimizer), format_bytes(activations),
      context > 0 ? fmt::format(", ring attention {}", format_bytes(context)) : std::string(),
      format_bytes(checkpoint));
}

double checkpoint_extra_bytes(const RunConfig& c, int64_t owned, int64_t global, int64_t local) {
  const int64_t e = static_cast<int64_t>(dtype_size(c.model.dtype));
  if (c.diloco.enabled()) return static_cast<double>((3 * global + local) * e);
  if (c.checkpoint.async) return static_cast<double>((1 + moment_count(c)) * owned * e);
  const int64_t buffer = static_cast<int64_t>(c.checkpoint.write_buffer_mb * (1 << 20)) / e;
  return static_cast<double>(std::min(buffer, owned) * e);
}

MemoryPlan plan_process_memory(const RunConfig& config) {
  const ModelConfig& mc = config.model;
  const ParallelConfig& pc = config.parallel;
  MemoryPlan p;
  if (config.data.source != "shards") {
    p.data = 4.0 * static_cast<double>(config.data.tokens + config.data.val_tokens);  // int32
  }
  // ModelConfig::validate bounds every dimension, so the counts fit int64. Each pipeline rank's
  // dense tensors are split over tp (replicated ones whole), experts also over ep. ZeRO shards the
  // dense ones over dp x cp (the gradient-reduction group; under DiLoCo, an island's) and the
  // experts over the dp x cp / ep ranks holding the same experts (edp).
  const plan::ModelSpec spec = mc.spec();
  const plan::Layout layout = layout_of(config);
  // A layout the pipeline cannot hold is the engine's to refuse, with its own message (the
  // schedule's, the stage partition's), right after this check: planned then as even stages.
  std::optional<plan::PipelineShape> shape;
  try {
    shape = plan::pipeline_shape(spec, layout);
  } catch (const Error&) {
  }
  auto held_by = [&](int r) {
    if (shape) return plan::params_of_rank(spec, layout, *shape, r);
    const plan::ModelCounts counts = plan::count_model(spec);
    const double split = static_cast<double>(pc.pp * pc.tp);
    return plan::LocalParams{static_cast<double>(counts.dense_total) / split,
                             static_cast<double>(counts.routed_total) / split / pc.ep};
  };
  const int islands = config.diloco.enabled() ? static_cast<int>(config.diloco.islands) : 1;
  const int n_dense = static_cast<int>(pc.dp / islands * pc.cp);
  const int n_experts = std::max(1, n_dense / static_cast<int>(pc.ep));
  const int zero = static_cast<int>(pc.zero);
  const StateBytes b = state_bytes(config);
  double owned = 0, local = 0;
  for (int r = 0; r < layout.pp; ++r) {
    const plan::LocalParams held = held_by(r);
    const plan::ModelStates st = plan::rank_model_states(held, zero, n_dense, n_experts, b.weights,
                                                         b.gradients, b.optimizer);
    const double master = (held.dense + held.expert) * b.whole_master;
    if (st.total() + master > p.weights + p.gradients + p.optimizer) {
      p.weights = st.parameters;
      p.gradients = st.gradients;
      p.optimizer = st.optimizer + master;
    }
    // What a checkpoint writes from this position: all it holds under ZeRO-0 (dp rank 0), its
    // chunks under ZeRO 1-3.
    owned = std::max(owned, zero >= 1 ? held.dense / n_dense + held.expert / n_experts
                                      : held.dense + held.expert);
    local = std::max(local, held.dense + held.expert);
  }
  p.checkpoint = checkpoint_extra_bytes(config, static_cast<int64_t>(owned),
                                        plan::count_model(spec).total, static_cast<int64_t>(local));
  // The engine's formula where it describes the layers (dense; tp, sp and cp split them): the
  // first stage's layers, one micro-batch in flight (the schedule may hold more).
  const int64_t e = static_cast<int64_t>(dtype_size(mc.dtype));
  const int64_t batch = std::max<int64_t>(1, config.train.micro_batch / pc.dp);
  const plan::TensorSplit split{pc.tp, pc.sp, pc.cp};
  if (!mc.moe.enabled() && shape) {
    const plan::StageUnits& u = shape->stages[shape->rank_stages[0][0]];
    const int64_t first = std::max(u.first_unit, 1) - 1;
    const int64_t last = std::min<int64_t>(u.last_unit, mc.n_layers) - 1;
    const plan::StageExtent stage{first, last - first + 1, u.last_unit == mc.n_layers + 1};
    p.activations = static_cast<double>(plan::engine_activation_bytes(spec, batch, mc.seq_len,
                                                                      mc.activation_policy(), e, e,
                                                                      stage, 1, split)
                                            .total());
  }
  if (pc.cp > 1) {
    p.context = static_cast<double>(plan::context_ring_buffer_bytes(
        spec, batch, mc.seq_len, e, split, plan::parse_cp_mla(pc.cp_mla, "parallel.cp_mla")));
  }
  return p;
}

double available_memory_bytes() {
  double available = meminfo_available();
  const double limit = read_number("/sys/fs/cgroup/memory.max");
  if (limit > 0) {
    const double in_cgroup = std::max(0.0, limit - read_number("/sys/fs/cgroup/memory.current"));
    available = available > 0 ? std::min(available, in_cgroup) : in_cgroup;
  }
  return available;
}

int local_process_count() {
  for (const char* name :
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}) {
    if (const char* v = std::getenv(name)) {
      const int n = std::atoi(v);
      if (n > 0) return n;
    }
  }
  return 1;
}

MemoryPlan check_memory(const RunConfig& config, bool allow_oversubscribe) {
  const MemoryPlan p = plan_process_memory(config);
  const double available = available_memory_bytes();
  const int local = local_process_count();
  if (allow_oversubscribe || available <= 0 || p.total() * local <= available) return p;
  throw Error(fmt::format(
      "out of memory: the run needs at least {} per process{} before any scratch or buffers, "
      "but this machine has {} available (MemAvailable, capped by the cgroup limit); use a "
      "smaller model, data.tokens or micro_batch, more pipeline stages or ZeRO, or pass "
      "--allow-oversubscribe-memory to try anyway",
      p.describe(),
      local > 1 ? fmt::format(", {} processes on this machine: {}", local,
                              plan::format_bytes(p.total() * local))
                : std::string(),
      plan::format_bytes(available)));
}

}  // namespace trillion
