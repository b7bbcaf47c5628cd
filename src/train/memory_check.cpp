// See memory_check.h.
#include "train/memory_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "plan/activation_memory.h"
#include "plan/model_spec.h"
#include "plan/units.h"

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

}  // namespace

std::string MemoryPlan::describe() const {
  using plan::format_bytes;
  return fmt::format(
      "{} (data {}, weights {}, gradients {}, optimizer {}, activations {} of one micro-batch)",
      format_bytes(total()), format_bytes(data), format_bytes(weights), format_bytes(gradients),
      format_bytes(optimizer), format_bytes(activations));
}

MemoryPlan plan_process_memory(const RunConfig& config) {
  const ModelConfig& mc = config.model;
  const ParallelConfig& pc = config.parallel;
  MemoryPlan p;
  if (config.data.source != "shards") {
    p.data = 4.0 * static_cast<double>(config.data.tokens + config.data.val_tokens);  // int32
  }
  // ModelConfig::validate bounds every dimension, so the counts fit int64.
  const plan::ModelCounts counts = plan::count_model(mc.spec());
  const double e = static_cast<double>(dtype_size(mc.dtype));
  // Dense tensors split over the stages and tensor ranks, experts also over ep. ZeRO shards the
  // dense ones over dp x cp (the gradient-reduction group) and the experts over the dp x cp / ep
  // ranks holding the same experts (edp).
  const double stages = static_cast<double>(pc.pp * pc.tp);
  const double dense = static_cast<double>(counts.dense_total) / stages;
  const double experts =
      static_cast<double>(counts.routed_total) / static_cast<double>(pc.ep) / stages;
  const double n_dense = static_cast<double>(pc.dp * pc.cp);
  const double n_experts = std::max(1.0, n_dense / static_cast<double>(pc.ep));
  auto sharded = [&](bool by_zero) {
    return by_zero ? dense / n_dense + experts / n_experts : dense + experts;
  };
  p.weights = sharded(pc.zero >= 3) * e;
  p.gradients = sharded(pc.zero >= 2) * e;
  p.optimizer = 2 * sharded(pc.zero >= 1) * e;
  // The engine's formula where it describes the layers (dense, no cp; tp and sp split them):
  // the first stage's layers, one micro-batch in flight (the schedule may hold more).
  if (pc.cp == 1 && !mc.moe.enabled()) {
    const int64_t batch = std::max<int64_t>(1, config.train.micro_batch / pc.dp);
    const plan::StageExtent first{0, std::max<int64_t>(1, mc.n_layers / pc.pp), pc.pp == 1};
    p.activations = static_cast<double>(
        plan::engine_activation_bytes(mc.spec(), batch, mc.seq_len, mc.activation_policy(),
                                      static_cast<int64_t>(e), static_cast<int64_t>(e), first, 1,
                                      {pc.tp, pc.sp, pc.cp})
            .total());
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
